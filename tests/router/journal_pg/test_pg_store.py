"""What only the PostgreSQL journal does, against a real server: its transaction,
path, grouped inserts, kept writes, NULs. What both journals keep (rows, order,
states, parcels, finished msgids, SCHEDULEs) is tests/router/test_journal_backends.py."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from django_eventmq.protocol.batch import pack_jobs
from django_eventmq.router.journal.parcels import parcel_digest
from django_eventmq.router.journal.postgres import PostgresJournal
from django_eventmq.router.journal.schema import (
    DELAYED,
    LEASED,
    POISONED,
    WAITING,
    JobState,
    Parcel,
)
from tests.router.journal_pg.conftest import Opener, add, crash
from tests.router.test_journal import parcel, reuse_freed_msgids, row

pytestmark = pytest.mark.postgres


def test_a_commit_is_in_the_database_when_it_returns_and_not_before(
    open_journal: Opener, other: psycopg.Connection[Any]
) -> None:
    journal = open_journal()
    add(journal, 1)
    journal.waiting("default", None, 10)  # applied into the open transaction, not committed
    assert other.execute("SELECT count(*) FROM jobs").fetchone() == (0,)
    journal.commit()
    assert other.execute("SELECT msgid FROM jobs").fetchall() == [(b"m1",)]


def test_committed_jobs_survive_reopening_and_leased_ones_wait_again(
    open_journal: Opener,
) -> None:
    journal = open_journal()
    add(journal, 1)
    add(journal, 2, state=LEASED)
    add(journal, 3, state=LEASED)
    journal.commit()
    journal.delete(3)  # finished, but never committed: as if the router died here
    add(journal, 4)
    journal.waiting("default", None, 10)  # written into the transaction, not committed
    crash(journal)

    again = open_journal()
    assert again.recover() == 2
    assert [r.msgid for r in again.waiting("default", None, 10)] == ["m1", "m2", "m3"]
    assert again.max_seq() == 3
    assert again.counts()[WAITING] == {"default": 3}


def test_the_path_names_server_and_group_without_the_password(pg_dsn: str, pg_group: str) -> None:
    # Trust authentication here: the password is sent and ignored.
    journal = PostgresJournal(pg_dsn.replace("postgres@", "postgres:s3cret@"), group=pg_group)
    try:
        assert "s3cret" not in journal.path
        assert journal.path.startswith("postgresql://postgres@127.0.0.1:")
        assert journal.path.endswith("#" + pg_group)
    finally:
        journal.close()


# -- dedupe by msgid, kept writes ------------------------------------------------------


def test_an_add_that_may_meet_a_stored_msgid_inserts_at_once_and_finds_it(
    open_journal: Opener,
) -> None:
    journal = open_journal()
    add(journal, 1)
    assert add(journal, 2, msgid="m1") is False  # the same msgid, kept: refused
    journal.commit()
    # m1 is only in the database now: a kept add could not see it, an at-once one does.
    assert add(journal, 3, msgid="m1", on_disk=True) is False
    assert add(journal, 4, on_disk=True) is True
    journal.commit()
    assert [r.seq for r in journal.waiting("default", None, 10)] == [1, 4]
    assert journal.holds_row("m4") and not journal.holds_row("m3")


def test_a_grouped_insert_stores_all_but_the_held_msgids(open_journal: Opener) -> None:
    journal = open_journal()
    add(journal, 1)
    journal.commit()
    rows = [row(seq, msgid=msgid) for seq, msgid in [(2, "m2"), (3, "m1"), (4, "m4")]]
    assert journal.add_many(rows) == {2, 4}
    assert journal.pending == 3
    assert journal.add_many([]) == set()
    journal.commit()
    assert [r.msgid for r in journal.waiting("default", None, 10)] == ["m1", "m2", "m4"]


def test_reads_see_writes_that_are_still_kept(open_journal: Opener) -> None:
    journal = open_journal()
    add(journal, 1)
    add(journal, 2, state=DELAYED, due=50.0)
    journal.set_state(1, LEASED)
    assert journal.waiting("default", None, 10) == []
    assert journal.next_due() == 50.0
    assert [r.msgid for r in journal.take_due(60.0)] == ["m2"]
    assert [r.msgid for r in journal.waiting("default", None, 10)] == ["m2"]
    assert journal.max_seq() == 2
    add(journal, 3, owner="key-3")
    assert journal.owner_of("m3") == "key-3" and journal.owner_of("m1") == ""
    assert journal.owner_of("zz") is None


def test_changes_to_one_row_are_merged_and_a_job_added_and_finished_is_never_written(
    open_journal: Opener, other: psycopg.Connection[Any]
) -> None:
    journal = open_journal()
    add(journal, 1)
    journal.commit()
    # A trigger logs every row written to jobs from here on.
    other.execute(
        """
        CREATE TABLE writes (op text, seq bigint);
        CREATE FUNCTION log_write() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN INSERT INTO writes VALUES (TG_OP, COALESCE(NEW.seq, OLD.seq)); RETURN NULL; END $$;
        CREATE TRIGGER log_write AFTER INSERT OR UPDATE OR DELETE ON jobs
            FOR EACH ROW EXECUTE FUNCTION log_write();
        """
    )
    journal.set_state(1, LEASED)
    journal.requeue(1, deaths=1)
    journal.poison(1, deaths=2, reason="died twice")
    add(journal, 2)
    journal.set_state(2, LEASED)
    journal.delete(2)
    assert journal.pending == 6
    journal.commit()
    assert other.execute("SELECT op, seq FROM writes").fetchall() == [("UPDATE", 1)]
    found = journal.find("m1")
    assert found is not None and found[0] == POISONED and found[1].deaths == 2
    assert found[1].attempts == 0


def test_a_row_in_a_state_this_release_does_not_know_stops_nothing(open_journal: Opener) -> None:
    journal = open_journal()
    for seq, state in enumerate([*JobState, 9], start=1):
        add(journal, seq, state=state)
    journal.commit()
    counts = journal.counts()
    assert {state: sum(c.values()) for state, c in counts.items()} == dict.fromkeys(JobState, 1)
    assert journal.find("m5") is None
    found = journal.find("m2")
    assert found is not None and found[0] is JobState.LEASED


# -- finished msgids and kept SCHEDULEs ---------------------------------------------------


# -- parcels ---------------------------------------------------------------------------------


def test_a_digest_whose_parcel_is_gone_gives_way_to_the_same_batch_again(
    open_journal: Opener, other: psycopg.Connection[Any]
) -> None:
    frame = pack_jobs([(b"p%d" % i, b"email", b"guarantee", b"[]") for i in range(5)])
    journal = open_journal()
    journal.add_parcel(parcel(10, 5, frame))
    journal.add_parcel(parcel(20, 1, b"x", queue="other"))
    journal.commit()
    journal.close()
    other.execute("DELETE FROM parcels WHERE seq = 10")  # its digest row is left
    journal = open_journal()
    assert journal.parcel_count() == 1
    assert not journal.holds_parcel(parcel_digest(frame))
    journal.add_parcel(parcel(30, 5, frame, accepted=2.0))
    journal.commit()
    assert journal.holds_parcel(parcel_digest(frame))


def test_a_nul_in_what_clients_send_is_stored_like_any_other_character(
    open_journal: Opener,
) -> None:
    """PostgreSQL text cannot hold NUL: a msgid or queue with one must not fail the
    transaction (it would fail the leader's, then, resent, its successor's)."""
    msgid, queue = "m\x001", "q\x00"
    journal = open_journal()
    journal.keep_finished(10, 60.0)
    assert add(journal, 1, msgid=msgid, queue=queue)
    assert add(journal, 2, msgid="m\x002", queue=queue, on_disk=True)
    journal.add_finished("done\x00", time.time())
    frame = pack_jobs([(b"p\x00", b"q", b"", b"[]")])
    journal.add_parcel(Parcel(10, 1, queue, 0, True, b"", b"c", 1.0, frame))
    journal.add_schedule([b"s"], unschedule=False, job_key="k\x00", timing_key="t\x00")
    journal.commit()
    journal.poison(1, deaths=3, reason="why\x00")
    assert journal.commit() is True
    assert not journal.closed
    assert [r.msgid for r in journal.waiting(queue, None, 10)] == ["m\x002"]
    assert journal.holds_row(msgid) and not add(journal, 3, msgid=msgid, on_disk=True)
    found = journal.find(msgid)
    assert found is not None and (found[0], found[1].queue) == (POISONED, queue)
    assert [(row.msgid, reason) for row, reason in journal.poisoned()] == [(msgid, "why\x00")]
    assert journal.counts()[WAITING] == {queue: 2}
    assert journal.finished_since(0)[0][0] == "done\x00"
    assert journal.parcels_holding("p\x00") == [10]
    assert journal.open_parcel(10, skip=set()) == (queue, 0)
    assert journal.drop_schedules("k\x00", "t\x00") == 1


@pytest.mark.parametrize(("sync", "setting"), [("full", "on"), ("normal", "off")])
def test_sync_sets_synchronous_commit(open_journal: Opener, sync: str, setting: str) -> None:
    journal = open_journal(sync=sync)
    assert journal.conn.execute("SHOW synchronous_commit").fetchone() == (setting,)
    add(journal, 1)
    assert journal.commit() is True


def test_a_msgid_freed_in_the_same_commit_is_stored_again_kept_or_at_once(
    open_journal: Opener, other: psycopg.Connection[Any]
) -> None:
    reuse_freed_msgids(open_journal())
    rows = other.execute("SELECT seq, msgid FROM jobs ORDER BY seq").fetchall()
    assert rows == [(3, b"m1"), (4, b"m2")]
