"""The PostgreSQL journal keeps what the SQLite journal keeps (the cases of
tests/router/test_journal*.py, against a real server): rows, order, states,
recovery, dedupe by msgid, parcels, finished msgids, SCHEDULEs."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from django_eventmq.protocol.batch import pack_jobs
from django_eventmq.router.dedup import FinishedWindow
from django_eventmq.router.journal.parcels import parcel_digest
from django_eventmq.router.journal.postgres import PostgresJournal
from django_eventmq.router.journal.schema import (
    DELAYED,
    LEASED,
    POISONED,
    WAITING,
    JobState,
    new_row,
)
from tests.router.journal_pg.conftest import Opener, add, crash
from tests.router.test_journal import reuse_freed_msgids

pytestmark = pytest.mark.postgres


def test_a_job_is_stored_once_per_msgid_and_read_back_whole(open_journal: Opener) -> None:
    journal = open_journal()
    assert add(journal, 1) is True
    assert add(journal, 2, msgid="m1") is False  # the same msgid is the same job
    assert journal.commit() is True
    rows = journal.waiting("default", None, 10)
    assert [(r.seq, r.msgid, r.headers, r.body, r.client, r.guarantee) for r in rows] == [
        (1, "m1", b"guarantee", b'["run", {}]', b"client-1", True)
    ]
    assert journal.syncs == 1
    assert journal.commit() is False  # nothing to commit: no transaction
    assert journal.syncs == 1


def test_a_commit_is_in_the_database_when_it_returns_and_not_before(
    open_journal: Opener, other: psycopg.Connection[Any]
) -> None:
    journal = open_journal()
    add(journal, 1)
    journal.waiting("default", None, 10)  # applied into the open transaction, not committed
    assert other.execute("SELECT count(*) FROM jobs").fetchone() == (0,)
    journal.commit()
    assert other.execute("SELECT msgid FROM jobs").fetchall() == [(b"m1",)]


def test_waiting_order_is_priority_then_age_and_pages_by_key(open_journal: Opener) -> None:
    journal = open_journal()
    for seq, prio in [(1, 0), (2, 5), (3, 0), (4, -1), (5, 5)]:
        add(journal, seq, priority=prio)
    add(journal, 6, state=LEASED)
    add(journal, 7, queue="other")
    first = journal.waiting("default", None, 2)
    assert [r.msgid for r in first] == ["m2", "m5"]
    last = first[-1]
    rest = journal.waiting("default", (last.nprio, last.seq), 10)
    assert [r.msgid for r in rest] == ["m1", "m3", "m4"]


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


def test_delayed_jobs_come_due_in_time_order(open_journal: Opener) -> None:
    journal = open_journal()
    add(journal, 1, state=DELAYED, due=200.0)
    add(journal, 2, state=DELAYED, due=100.0)
    assert journal.next_due() == 100.0
    assert journal.take_due(50.0) == []
    assert [r.msgid for r in journal.take_due(150.0)] == ["m2"]
    assert journal.next_due() == 200.0
    assert [r.msgid for r in journal.waiting("default", None, 10)] == ["m2"]
    journal.delay(2, 300.0, attempts=1)
    assert [r.msgid for r in journal.take_due(1000.0)] == ["m1", "m2"]
    assert journal.next_due() is None


def test_poisoned_jobs_are_listed_with_their_reason(open_journal: Opener) -> None:
    journal = open_journal()
    add(journal, 1, state=LEASED)
    journal.poison(1, deaths=3, reason="poisoned: its worker died, 3 time(s)")
    (row, reason), *more = journal.poisoned()
    assert (row.msgid, row.deaths, more) == ("m1", 3, [])
    assert "3 time(s)" in reason
    assert journal.counts()[POISONED] == {"default": 1}
    found = journal.find("m1")
    assert found is not None and found[0] == POISONED
    assert journal.find("nope") is None
    assert journal.recover() == 0  # poisoned jobs are not handed out again


def test_size_and_emptiness(open_journal: Opener) -> None:
    journal = open_journal()
    assert journal.is_empty()
    before = journal.size_bytes()
    add(journal, 1, body=b"[" + b"x" * 100_000 + b"]")
    journal.commit()
    assert journal.size_bytes() > before
    assert not journal.is_empty()


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
    rows = [
        new_row(seq, msgid, "default", 0, WAITING, True, b"", b"[]", b"c", 1.0)
        for seq, msgid in [(2, "m2"), (3, "m1"), (4, "m4")]
    ]
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


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_finished_msgids_are_kept_across_reopening_within_window_and_count(
    open_journal: Opener,
) -> None:
    clock = Clock(10_000.0)
    journal = open_journal()
    window = FinishedWindow(journal, keep=3, window=60.0, clock=clock)  # type: ignore[arg-type]
    for n in range(5):
        clock.now += 1
        window.add(f"m{n}")
    journal.commit()
    assert [m for m in ("m0", "m1", "m2", "m3", "m4") if m in window] == ["m2", "m3", "m4"]
    assert journal.finished_count() == 3
    crash(journal)

    journal = open_journal()
    clock.now += 30
    reopened = FinishedWindow(journal, keep=3, window=60.0, clock=clock)  # type: ignore[arg-type]
    assert reopened.load() == 3 and "m4" in reopened and "m1" not in reopened
    clock.now = 10_064.5  # m2..m4 finished at 10,003..10,005
    assert FinishedWindow(journal, keep=3, window=60.0, clock=clock).load() == 1  # type: ignore[arg-type]


def test_old_finished_msgids_are_pruned_in_a_commit(open_journal: Opener) -> None:
    journal = open_journal()
    journal.keep_finished(1000, 60.0)
    real_now = time.time()
    for n in range(10):
        journal.add_finished(f"old{n}", real_now - 120)  # finished two minutes ago
    journal.add_finished("young", real_now)
    journal.commit()
    assert journal.finished_count() == 1
    assert journal.finished_since(0) == [("young", real_now)]
    assert not journal.is_empty()


def test_nothing_is_remembered_when_the_window_is_off(open_journal: Opener) -> None:
    journal = open_journal()
    window = FinishedWindow(journal, keep=100, window=0.0)  # type: ignore[arg-type]
    window.add("m1")
    journal.commit()
    assert "m1" not in window and journal.finished_count() == 0


def test_kept_schedules_come_back_whole_in_order_and_unschedule_drops_its_job(
    open_journal: Opener,
) -> None:
    frames_a = [b"", b"eMQP/1.0", b"SCHEDULE", b"id-a", b"q", b"", b"60", b"[1]", b""]
    frames_b = [b"", b"eMQP/1.0", b"SCHEDULE", b"id-b", b"q", b"", b"", b"[2]", b"* * * * *"]
    frames_u = [b"", b"eMQP/1.0", b"UNSCHEDULE", b"id-u", b"q", b"", b"[2]"]
    journal = open_journal()
    journal.add_schedule(frames_a, unschedule=False, job_key="A", timing_key="60")
    journal.add_schedule(frames_b, unschedule=False, job_key="B", timing_key="cron")
    journal.add_schedule(frames_b, unschedule=False, job_key="B", timing_key="other")
    assert journal.drop_schedules("B", "cron") == 1
    # Kept, an UNSCHEDULE drops every timing of its job left, in the same write.
    assert journal.keep_unschedule(frames_u, "B", "") == 1
    journal.commit()
    journal.close()
    journal = open_journal()
    kept = journal.schedules()
    assert [(u, f) for _, u, f in kept] == [(False, frames_a), (True, frames_u)]
    assert journal.drop_schedules("B", "") == 0  # an UNSCHEDULE is never dropped
    journal.delete_schedule(kept[0][0])
    journal.commit()
    assert journal.schedule_count() == 1 and not journal.is_empty()


# -- parcels ---------------------------------------------------------------------------------


def test_a_parcel_counts_as_its_jobs_and_opens_into_rows_minus_the_held_ones(
    open_journal: Opener,
) -> None:
    body = b'["run", {}]'
    frame = pack_jobs([(b"p%d" % i, b"email", b"guarantee", body) for i in range(5)])
    journal = open_journal()
    add(journal, 1, msgid="p3", queue="email")  # held already: the parcel's copy is dropped
    journal.add_parcel(10, 5, "email", 2, True, b"guarantee", b"client-9", 1234.5, frame)
    journal.commit()
    assert not journal.is_empty()
    assert journal.counts()[WAITING] == {"email": 6}
    assert journal.max_seq() == 14
    assert journal.parcels_holding("p4") == [10] and journal.parcels_holding("zz") == []
    assert journal.next_parcel("email", (-2, 9)) is None
    assert journal.next_parcel("email", (-2, 10)) == 10
    assert journal.next_parcel("other", None) is None
    journal.close()
    journal = open_journal()  # reopened: the parcel is still there and known
    assert journal.parcel_count() == 1
    assert journal.open_parcel(10, skip={"p0"}) == ("email", 2)
    journal.commit()
    rows = journal.waiting("email", None, 10)
    assert [(r.seq, r.msgid, r.nprio) for r in rows] == [
        (11, "p1", -2),
        (12, "p2", -2),
        (14, "p4", -2),
        (1, "p3", 0),
    ]
    assert (rows[0].headers, rows[0].body, rows[0].client, rows[0].accepted) == (
        b"guarantee",
        body,
        b"client-9",
        1234.5,
    )
    assert journal.parcel_count() == 0 and journal.next_parcel("email", None) is None
    assert journal.counts()[WAITING] == {"email": 4}


def test_a_parcel_is_known_by_its_frame_until_it_is_opened(open_journal: Opener) -> None:
    body = b'["run", {}]'
    frame = pack_jobs([(b"p%d" % i, b"email", b"guarantee", body) for i in range(5)])
    other = pack_jobs([(b"p%d" % i, b"email", b"guarantee", body) for i in range(4)])
    journal = open_journal()
    assert not journal.holds_parcel(parcel_digest(frame))
    journal.add_parcel(10, 5, "email", 0, True, b"guarantee", b"c", 1.0, frame)
    add(journal, 1, msgid="row-1", queue="email")
    assert journal.holds_row("row-1") and not journal.holds_row("p1")
    journal.commit()
    journal.close()
    journal = open_journal()
    assert journal.holds_parcel(parcel_digest(frame))
    assert not journal.holds_parcel(parcel_digest(other))
    journal.open_parcel(10, skip=set())
    journal.commit()
    assert not journal.holds_parcel(parcel_digest(frame))
    assert journal.holds_row("p1")


def test_a_digest_whose_parcel_is_gone_gives_way_to_the_same_batch_again(
    open_journal: Opener, other: psycopg.Connection[Any]
) -> None:
    frame = pack_jobs([(b"p%d" % i, b"email", b"guarantee", b"[]") for i in range(5)])
    journal = open_journal()
    journal.add_parcel(10, 5, "email", 0, True, b"guarantee", b"c", 1.0, frame)
    journal.add_parcel(20, 1, "other", 0, True, b"guarantee", b"c", 1.0, b"x")
    journal.commit()
    journal.close()
    other.execute("DELETE FROM parcels WHERE seq = 10")  # its digest row is left
    journal = open_journal()
    assert journal.parcel_count() == 1
    assert not journal.holds_parcel(parcel_digest(frame))
    journal.add_parcel(30, 5, "email", 0, True, b"guarantee", b"c", 2.0, frame)
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
    journal.add_parcel(
        10, 1, queue, 0, True, b"", b"c", 1.0, pack_jobs([(b"p\x00", b"q", b"", b"[]")])
    )
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
