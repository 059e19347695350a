"""Fencing and failures of the PostgreSQL journal (docs: notes on issue 19's seams):
the fence runs last in every transaction the journal commits; a fence that fails,
a connection terminated or a transaction idle past the lease leave nothing of
that transaction in the database, and the journal dead: LeadershipLost from that
call and every later one, close() never raises."""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg
import pytest

from django_eventmq.errors import ConfigurationError
from django_eventmq.protocol.batch import pack_jobs
from django_eventmq.router.journal.postgres import LEASE_SHARE, PostgresJournal
from django_eventmq.router.journal.schema import Parcel
from django_eventmq.router.leadership import LeadershipLost, Lease, fence
from tests.router.journal_pg.conftest import Opener, add
from tests.support import free_port, wait_for

pytestmark = pytest.mark.postgres


class LeaseFence:
    """A fence as the leadership module's: an UPDATE of the lease row that matches
    only our epoch, LeadershipLost when it matched none. It also records what its
    transaction saw, to show it runs last."""

    def __init__(self, conn: psycopg.Connection[Any], epoch: int = 1) -> None:
        self.epoch = epoch
        self.calls = 0
        self.jobs_seen: list[int] = []
        conn.execute("CREATE TABLE test_lease (epoch integer NOT NULL, renewals integer NOT NULL)")
        conn.execute("INSERT INTO test_lease VALUES (%s, 0)", (epoch,))

    def __call__(self, cursor: psycopg.Cursor[Any]) -> None:
        self.calls += 1
        self.jobs_seen.append(cursor.execute("SELECT count(*) FROM jobs").fetchone()[0])  # type: ignore[index]
        cursor.execute(
            "UPDATE test_lease SET renewals = renewals + 1 WHERE epoch = %s", (self.epoch,)
        )
        if cursor.rowcount == 0:
            raise LeadershipLost(f"test group is led by another epoch than {self.epoch} now")


def fenced(
    open_journal: Opener, other: psycopg.Connection[Any], **options: Any
) -> tuple[PostgresJournal, LeaseFence]:
    journal = open_journal(**options)
    fence = LeaseFence(other)
    journal._fence = fence  # the schema exists once a journal opened it
    return journal, fence


def take_over(other: psycopg.Connection[Any]) -> None:
    """Another member leads: the epoch grows."""
    other.execute("UPDATE test_lease SET epoch = epoch + 1")


def renewals(other: psycopg.Connection[Any]) -> int:
    return int(other.execute("SELECT renewals FROM test_lease").fetchone()[0])  # type: ignore[index]


def backend_gone(other: psycopg.Connection[Any], pid: int, what: str) -> None:
    wait_for(
        lambda: (
            other.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
            is None
        ),
        timeout=10,
        what=what,
    )


def assert_dead(journal: PostgresJournal) -> None:
    assert journal.closed and journal.failure is not None
    for call in (
        lambda: add(journal, 99),
        lambda: journal.commit(),
        lambda: journal.renew(),
        lambda: journal.waiting("default", None, 10),
        lambda: journal.holds_row("m1"),
        lambda: journal.counts(),
        lambda: journal.set_state(1, 0),  # type: ignore[arg-type]
    ):
        with pytest.raises(LeadershipLost):
            call()
    journal.close()  # never raises
    journal.close()


def test_the_fence_runs_last_in_every_commit(
    open_journal: Opener, other: psycopg.Connection[Any]
) -> None:
    journal, fence = fenced(open_journal, other)
    add(journal, 1)
    add(journal, 2)
    assert journal.commit() is True
    assert fence.jobs_seen == [2]  # the kept writes were applied before it
    assert renewals(other) == 1  # and its own write committed with them
    assert journal.commit() is False and fence.calls == 1  # no transaction, no fence
    journal.recover()
    assert fence.calls == 2


def test_a_fence_that_fails_leaves_nothing_of_its_transaction_and_kills_the_journal(
    open_journal: Opener, other: psycopg.Connection[Any]
) -> None:
    journal, _ = fenced(open_journal, other)
    pid = journal.conn.info.backend_pid
    add(journal, 1)
    journal.commit()
    take_over(other)
    add(journal, 2)
    add(journal, 3, msgid="m1", on_disk=True)  # written at once, inside the transaction
    frame = pack_jobs([(b"p", b"email", b"", b"[]")] * 2)
    journal.add_parcel(Parcel(10, 2, "email", 0, True, b"", b"c", 1.0, frame))
    journal.add_schedule([b"x"], unschedule=False, job_key="A", timing_key="")
    with pytest.raises(LeadershipLost, match="another epoch"):
        journal.commit()
    assert other.execute("SELECT seq FROM jobs").fetchall() == [(1,)]
    assert other.execute("SELECT count(*) FROM parcels").fetchone() == (0,)
    assert other.execute("SELECT count(*) FROM schedules").fetchone() == (0,)
    assert renewals(other) == 1  # the failed fence's own UPDATE is gone too
    assert_dead(journal)
    # Its connection is gone: it holds no lock and no transaction on the server.
    backend_gone(other, pid, "the dead journal's backend to end")


def test_a_terminated_connection_is_leadership_lost_with_nothing_half_written(
    open_journal: Opener, other: psycopg.Connection[Any]
) -> None:
    journal, fence = fenced(open_journal, other)
    add(journal, 1)
    journal.commit()
    add(journal, 2, on_disk=True)  # written at once: the transaction is open
    add(journal, 3)
    pid = journal.conn.info.backend_pid
    assert other.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)).fetchone() == (True,)
    with pytest.raises(LeadershipLost) as lost:
        journal.commit()
    assert isinstance(lost.value.__cause__, psycopg.OperationalError)
    assert other.execute("SELECT seq FROM jobs").fetchall() == [(1,)]
    assert fence.calls == 1
    assert_dead(journal)


def test_a_read_on_a_terminated_connection_is_leadership_lost(
    open_journal: Opener, other: psycopg.Connection[Any]
) -> None:
    journal = open_journal()
    pid = journal.conn.info.backend_pid
    other.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
    with pytest.raises(LeadershipLost):
        journal.holds_row("m1")
    assert_dead(journal)


def test_a_transaction_idle_past_the_lease_is_ended_by_the_server(
    open_journal: Opener, other: psycopg.Connection[Any]
) -> None:
    journal = open_journal(lease_seconds=0.3)
    assert journal.conn.execute("SHOW idle_in_transaction_session_timeout").fetchone() == ("300ms",)
    pid = journal.conn.info.backend_pid
    add(journal, 1, on_disk=True)  # the transaction is open, then the router stalls
    backend_gone(other, pid, "the server to end the session idle in its transaction")
    with pytest.raises(LeadershipLost):
        journal.commit()
    assert other.execute("SELECT count(*) FROM jobs").fetchone() == (0,)
    assert_dead(journal)


def test_renew_is_a_transaction_holding_the_fence(
    open_journal: Opener, other: psycopg.Connection[Any]
) -> None:
    journal, fence = fenced(open_journal, other, lease_seconds=5.0)
    assert not journal.lease_valid(time.monotonic())  # no fence has run yet
    journal.renew()
    after = time.monotonic()
    assert fence.calls == 1 and renewals(other) == 1
    assert journal.syncs == 0  # nothing was kept: no sync counted
    assert journal.lease_valid(after)
    assert not journal.lease_valid(after + 5.0 * LEASE_SHARE)
    add(journal, 1)
    journal.renew()  # what was kept is committed with it
    assert journal.pending == 0 and journal.syncs == 1
    assert other.execute("SELECT seq FROM jobs").fetchall() == [(1,)]
    take_over(other)
    with pytest.raises(LeadershipLost):
        journal.renew()
    assert not journal.lease_valid(time.monotonic())
    assert_dead(journal)


def test_close_commits_what_is_kept_unless_the_fence_fails(
    open_journal: Opener, other: psycopg.Connection[Any]
) -> None:
    journal, _ = fenced(open_journal, other)
    add(journal, 1)
    journal.close()
    assert journal.closed
    assert other.execute("SELECT seq FROM jobs").fetchall() == [(1,)]
    journal, _ = fenced_again(open_journal, other)
    add(journal, 2)
    take_over(other)
    journal.close()  # the fence fails: nothing raised, nothing written
    assert journal.closed
    assert other.execute("SELECT seq FROM jobs").fetchall() == [(1,)]


def fenced_again(
    open_journal: Opener, other: psycopg.Connection[Any]
) -> tuple[PostgresJournal, LeaseFence]:
    journal = open_journal()
    fence = LeaseFence.__new__(LeaseFence)
    fence.epoch, fence.calls, fence.jobs_seen = 1, 0, []
    journal._fence = fence
    return journal, fence


def test_a_server_that_cannot_be_reached_is_leadership_lost_at_open(pg_group: str) -> None:
    dsn = f"postgresql://postgres@127.0.0.1:{free_port()}/test?connect_timeout=2"
    with pytest.raises(LeadershipLost, match="cannot connect"):
        PostgresJournal(dsn, group=pg_group)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"group": "Bad-Name"}, "a-z, 0-9 and _"),
        ({"group": "x" * 41}, "1 to 40"),
        ({"sync": "fast"}, "JOURNAL_SYNC"),
        ({"lease_seconds": 0}, "LEASE_SECONDS"),
    ],
)
def test_bad_options_say_how_to_fix_them(pg_dsn: str, options: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        PostgresJournal(pg_dsn, **options)


def test_a_fence_kept_waiting_for_the_lease_row_past_the_lease_is_leadership_lost(
    open_journal: Opener, other: psycopg.Connection[Any], pg_dsn: str
) -> None:
    """A takeover holds the lease row locked: the fence must not wait on it for
    longer than the lease (lock_timeout), and its transaction must not land."""
    journal, _ = fenced(open_journal, other, lease_seconds=0.3)
    add(journal, 1)
    with psycopg.connect(pg_dsn) as standby:  # a transaction holding the row lock
        standby.execute(f"SELECT * FROM emq_{journal.group}.test_lease FOR UPDATE")
        with pytest.raises(LeadershipLost, match="lock"):
            journal.commit()
    assert other.execute("SELECT count(*) FROM jobs").fetchone() == (0,)
    assert_dead(journal)


def test_the_connection_ends_itself_when_the_server_goes_silent(open_journal: Opener) -> None:
    journal = open_journal(lease_seconds=4.0)
    parameters = journal.conn.info.get_parameters()
    assert {key: parameters.get(key) for key in ("keepalives", "keepalives_idle")} == {
        "keepalives": "1",
        "keepalives_idle": "4",
    }
    assert journal.conn.execute("SHOW lock_timeout").fetchone() == ("4s",)


def test_keepalive_settings_in_the_dsn_win(pg_dsn: str, pg_group: str) -> None:
    dsn = pg_dsn + ("&" if "?" in pg_dsn else "?") + "keepalives_idle=17"
    journal = PostgresJournal(dsn, group=pg_group)
    try:
        assert journal.conn.info.get_parameters()["keepalives_idle"] == "17"
    finally:
        journal.close()


def test_a_dsn_that_is_not_one_says_how_to_write_it(pg_group: str) -> None:
    with pytest.raises(ConfigurationError, match="postgresql://user@host:port/database"):
        PostgresJournal("not a dsn", group=pg_group)


def test_with_the_group_lease_a_deposed_leader_cannot_commit(
    pg_dsn: str, pg_group: str, other: psycopg.Connection[Any]
) -> None:
    """The seam with .leadership: the journal fenced by the epoch a Lease won
    commits while that epoch holds the lease, and not once another member took it."""
    first = Lease(pg_dsn, pg_group, "a", lease_seconds=0.5)
    second = Lease(pg_dsn, pg_group, "b", lease_seconds=0.5)
    try:
        epoch = first.try_lead()
        assert epoch is not None
        journal = PostgresJournal(
            pg_dsn,
            group=pg_group,
            fence=lambda cursor: fence(cursor, pg_group, epoch, 0.5),
            lease_seconds=0.5,
        )
        add(journal, 1)
        assert journal.commit() is True
        journal.renew()
        assert journal.conn.execute("SELECT application_name FROM pg_stat_activity"
                                    " WHERE pid = pg_backend_pid()").fetchone() == (
            f"emq_router {pg_group} journal",
        )  # fmt: skip
        # The leader stops renewing: once its lease ran out the other member leads.
        taken = wait_for(second.try_lead, timeout=10, what="the second member to take over")
        assert taken == epoch + 1
        add(journal, 2)
        with pytest.raises(LeadershipLost, match=f"epoch {epoch}"):
            journal.commit()
        assert other.execute("SELECT seq FROM jobs").fetchall() == [(1,)]
        assert_dead(journal)
    finally:
        first.close()
        second.close()


def test_a_deposed_leader_whose_write_fails_first_is_told_it_lost_the_lease(
    pg_dsn: str, pg_group: str, other: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    """The new leader records finished msgids with the seqs the old one counts on
    too, so the old one's commit fails on that INSERT before its fence runs: the
    reason it gives is still the lost lease (seen in a soak: a resumed leader
    logged only a UniqueViolation)."""
    first = Lease(pg_dsn, pg_group, "a", lease_seconds=0.5)
    second = Lease(pg_dsn, pg_group, "b", lease_seconds=0.5)
    journals: list[PostgresJournal] = []

    def led_by(epoch: int) -> PostgresJournal:
        journal = PostgresJournal(
            pg_dsn,
            group=pg_group,
            fence=lambda cursor: fence(cursor, pg_group, epoch, 0.5),
            lease_seconds=0.5,
        )
        journal.keep_finished(100, 3600)
        journals.append(journal)
        return journal

    try:
        epoch = first.try_lead()
        assert epoch is not None
        old = led_by(epoch)
        taken = wait_for(second.try_lead, timeout=10, what="the second member to take over")
        assert taken is not None
        new = led_by(taken)
        new.add_finished("by-the-new-leader", time.time())
        assert new.commit() is True
        old.add_finished("by-the-old-leader", time.time())  # the same finished seq
        with (
            caplog.at_level(logging.ERROR, logger="django_eventmq.router"),
            pytest.raises(LeadershipLost, match=f"epoch {epoch}.*failed first: .*Unique"),
        ):
            old.commit()
        assert "failed first" in caplog.text
        assert other.execute("SELECT msgid FROM finished").fetchall() == [(b"by-the-new-leader",)]
        assert_dead(old)
    finally:
        for journal in journals:
            journal.close()
        first.close()
        second.close()


def test_the_lease_is_not_trusted_once_the_server_ended_the_connection(
    open_journal: Opener, other: psycopg.Connection[Any]
) -> None:
    """A standby takes over at once when the leader's backend is gone, while the
    leader's own lease still runs: the server's goodbye, unread on the socket, is
    enough for lease_valid to say no before any statement finds out."""
    journal, _ = fenced(open_journal, other, lease_seconds=60.0)
    journal.renew()
    assert journal.lease_valid(time.monotonic())
    pid = journal.conn.info.backend_pid
    assert other.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)).fetchone() == (True,)
    wait_for(
        lambda: not journal.lease_valid(time.monotonic()), 10, "lease_valid to see the goodbye"
    )
    with pytest.raises(LeadershipLost):
        journal.renew()
