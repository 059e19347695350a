"""Leadership of a router group: the lease row in PostgreSQL (router/leadership.py).

Real PostgreSQL (tests/pg_support.py), one group (schema) per test. A "journal
connection" here is a plain psycopg connection that calls fence() the way the
PostgreSQL journal does, as the last statement of its transactions.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from django_eventmq.errors import ConfigurationError, EventMQError
from django_eventmq.router import leadership
from django_eventmq.router.leadership import (
    LeadershipLost,
    Lease,
    ensure_lease_table,
    fence,
)
from tests.pg_support import drop_group, pg_dsn, pg_group  # noqa: F401
from tests.support import Proc, free_port, wait_for

pytestmark = pytest.mark.postgres

LOGGER = "django_eventmq.router"


class PG:
    """This test's group on the test server, and what the test opens there.

    ``close()`` (the fixture's teardown) closes every Lease and connection before
    the schemas are dropped: a DROP would wait for their locks.
    """

    def __init__(self, dsn: str, group: str) -> None:
        self.dsn, self.group = dsn, group
        self._leases: list[Lease] = []
        self._conns: list[psycopg.Connection[Any]] = []
        self._groups: list[str] = []

    def lease(self, member: str, seconds: float = 60.0, *, group: str = "", dsn: str = "") -> Lease:
        lease = Lease(dsn or self.dsn, group or self.group, member, lease_seconds=seconds)
        self._leases.append(lease)
        return lease

    def leader_and_standby(self, seconds: float = 60.0) -> tuple[Lease, Lease]:
        """Lease "a", leading with epoch 1, and lease "b", a standby."""
        a, b = self.lease("a", seconds), self.lease("b", seconds)
        assert a.try_lead() == 1
        return a, b

    def connect(self, **kwargs: Any) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self.dsn, **kwargs)
        self._conns.append(conn)
        return conn

    def other_group(self, suffix: str) -> str:
        """Another group name, its schema dropped afterwards too."""
        group = f"{self.group}_{suffix}"[:40]
        self._groups.append(group)
        return group

    def close(self) -> None:
        for lease in self._leases:
            lease.close()
        for conn in self._conns:
            conn.close()
        for group in self._groups:
            drop_group(self.dsn, group)


@pytest.fixture
def pg(pg_dsn: str, pg_group: str) -> Iterator[PG]:  # noqa: F811
    helper = PG(pg_dsn, pg_group)
    yield helper
    helper.close()


def renew(conn: psycopg.Connection[Any], group: str, epoch: int, lease_seconds: float) -> None:
    """One journal transaction that holds only the fence, committed."""
    with conn.cursor() as cur:
        fence(cur, group, epoch, lease_seconds)
    conn.commit()


def test_first_try_lead_leads_with_epoch_1(pg: PG) -> None:
    a = pg.lease("a")
    assert a.info() is None  # no leader yet
    assert a.try_lead() == 1
    info = a.info()
    assert info is not None
    assert (info.group, info.epoch, info.member) == (pg.group, 1, "a")
    assert info.failovers == 0
    assert info.last_failover is None and info.last_failover_seconds is None
    assert info.since == pytest.approx(info.renewed, abs=0.01)
    assert info.expires - info.renewed == pytest.approx(60.0, abs=1e-3)
    # The holder is the lease's own connection until a journal fences.
    assert a._conn is not None and info.pid == a._conn.info.backend_pid
    # Already held (by ourselves, alive, not expired): nothing to take.
    assert a.try_lead() is None


def test_standby_gets_nothing_while_the_leader_renews(pg: PG) -> None:
    _leader, b = pg.leader_and_standby(5.0)
    journal = pg.connect()
    for _ in range(20):
        renew(journal, pg.group, 1, 5.0)
        assert b.try_lead() is None
    info = b.info()
    assert info is not None
    assert (info.epoch, info.member, info.pid) == (1, "a", journal.info.backend_pid)


def test_takeover_after_the_lease_runs_out_and_the_old_fence_fails(
    pg: PG, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = pg.leader_and_standby(0.5)
    journal = pg.connect()
    renew(journal, pg.group, 1, 0.5)  # a's journal holds it, alive, then stops renewing
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert wait_for(b.try_lead, timeout=20, what="b takes the expired lease") == 2
    took = [r.getMessage() for r in caplog.records if "epoch 2" in r.getMessage()]
    assert len(took) == 1 and "no leader for" in took[0] and "'a'" in took[0], took

    with pytest.raises(LeadershipLost) as lost:
        renew(journal, pg.group, 1, 0.5)
    assert isinstance(lost.value, EventMQError)
    message = str(lost.value)
    assert pg.group in message and "epoch 1" in message
    assert "'b'" in message and "epoch 2" in message  # who leads now
    journal.rollback()

    info = a.info()
    assert info is not None
    assert (info.epoch, info.member, info.failovers) == (2, "b", 1)
    assert info.last_failover is not None
    assert info.last_failover_seconds is not None and info.last_failover_seconds > 0
    assert info.since == pytest.approx(info.last_failover, abs=0.01)
    # The new leader's journal fences with epoch 2.
    renew(journal, pg.group, 2, 0.5)


def test_a_fence_that_fails_rolls_back_the_journal_transaction(pg: PG) -> None:
    a, b = pg.leader_and_standby()
    a.release(1)
    assert b.try_lead() == 2
    journal = pg.connect()
    journal.execute(f"CREATE TABLE emq_{pg.group}.scratch (n int)")
    journal.commit()
    with pytest.raises(LeadershipLost), journal.transaction(), journal.cursor() as cur:
        cur.execute(f"INSERT INTO emq_{pg.group}.scratch VALUES (1)")
        fence(cur, pg.group, 1, 60.0)
    assert journal.execute(f"SELECT count(*) FROM emq_{pg.group}.scratch").fetchone() == (0,)


@pytest.mark.parametrize("how", ["pg_terminate_backend", "journal connection closed"])
def test_holder_connection_gone_standby_leads_at_its_next_poll(pg: PG, how: str) -> None:
    _leader, b = pg.leader_and_standby(600.0)
    journal = pg.connect()
    renew(journal, pg.group, 1, 600.0)
    assert b.try_lead() is None
    if how == "pg_terminate_backend":
        info = b.info()
        assert info is not None and info.pid == journal.info.backend_pid
        admin = pg.connect(autocommit=True)
        assert admin.execute("SELECT pg_terminate_backend(%s)", (info.pid,)).fetchone() == (True,)
    else:
        journal.close()
    # The lease has ten minutes left; the dead holder is enough.
    assert wait_for(b.try_lead, timeout=20, what="b takes over from a dead holder") == 2
    info = b.info()
    assert info is not None and (info.member, info.failovers) == ("b", 1)


# A leader process: takes the lease, then renews it from its "journal" connection.
LEADER = """
import sys, time, psycopg
from django_eventmq.router.leadership import Lease, fence
dsn, group = sys.argv[1:3]
lease = Lease(dsn, group, "proc", lease_seconds=600.0)
epoch = lease.try_lead()
journal = psycopg.connect(dsn)
renewals = 0
while True:
    with journal.cursor() as cur:
        fence(cur, group, epoch, 600.0)
    journal.commit()
    renewals += 1
    if renewals == 3:
        print("leading with epoch", epoch, flush=True)
    time.sleep(0.05)  # a router's loop between two fenced commits
"""


def test_sigkill_of_the_leader_process_fails_over_at_the_next_poll(pg: PG) -> None:
    standby = pg.lease("standby", 600.0)
    proc = Proc([sys.executable, "-c", LEADER, pg.dsn, pg.group])
    try:
        proc.wait_output("leading with epoch 1")
        assert standby.try_lead() is None
        proc.signal(signal.SIGKILL)
        proc.popen.wait(10)
        # Ten minutes of lease left: the dead connection is what hands it over.
        assert wait_for(standby.try_lead, timeout=20, what="the standby takes over") == 2
    finally:
        proc.stop()
    info = standby.info()
    assert info is not None and (info.member, info.failovers) == ("standby", 1)
    assert info.last_failover_seconds is not None
    print(f"failover after SIGKILL: {info.last_failover_seconds:.3f} s without a leader")


def test_lease_connection_killed_is_logged_and_reconnected(
    pg: PG, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = pg.leader_and_standby(600.0)
    info = b.info()
    assert info is not None
    admin = pg.connect(autocommit=True)
    admin.execute("SELECT pg_terminate_backend(%s)", (info.pid,))
    assert wait_for(b.try_lead, timeout=20, what="b takes over from a's dead connection") == 2
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert a.try_lead() is None  # its connection was terminated: logged, dropped
        assert a.try_lead() is None  # connected again; b leads
        assert a.info() is not None
    messages = [r.getMessage() for r in caplog.records]
    assert sum("standing by" in m for m in messages) == 1, messages
    assert sum("answers again" in m for m in messages) == 1, messages


def test_release_lets_a_standby_lead_at_once(pg: PG) -> None:
    a, b = pg.leader_and_standby(600.0)
    assert b.try_lead() is None
    a.release(1)
    assert b.try_lead() == 2  # the very next poll
    a.release(1)  # no longer ours: does nothing
    assert a.try_lead() is None
    info = a.info()
    assert info is not None and (info.epoch, info.member) == (2, "b") and info.pid is not None
    assert info.last_failover_seconds is not None and info.last_failover_seconds > 0


def test_a_paused_holder_with_the_row_locked_does_not_block_try_lead(pg: PG) -> None:
    _leader, b = pg.leader_and_standby(600.0)
    journal = pg.connect()
    journal.execute("SET idle_in_transaction_session_timeout = '3s'")
    renew(journal, pg.group, 1, 600.0)
    # The leader is paused in the middle of a transaction that holds the row lock.
    journal.execute(f"SELECT * FROM emq_{pg.group}.lease FOR UPDATE")
    # Locked is "not now": None at once, not a wait for the lock (which lasts
    # until PostgreSQL ends the idle transaction): the paused one is still there.
    assert b.try_lead() is None
    admin = pg.connect(autocommit=True)
    state = "SELECT state FROM pg_stat_activity WHERE pid = %s"
    assert admin.execute(state, (journal.info.backend_pid,)).fetchone() == ("idle in transaction",)
    assert b.info() is not None  # reading needs no lock
    assert wait_for(b.try_lead, timeout=30, what="PostgreSQL ends the paused transaction") == 2
    with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
        journal.execute("SELECT 1")


def test_a_standby_paused_inside_its_claim_does_not_stop_the_leaders_fence(pg: PG) -> None:
    _leader, b = pg.leader_and_standby(1.0)
    journal = pg.connect()
    renew(journal, pg.group, 1, 1.0)
    assert b.try_lead() is None and b._conn is not None
    # b stopped (SIGSTOP) between its SELECT ... FOR UPDATE and its COMMIT:
    b._conn.execute("BEGIN")
    b._conn.execute(f"SELECT * FROM emq_{pg.group}.lease FOR UPDATE")
    # The fence waits for the row only until PostgreSQL ends b's idle transaction.
    renew(journal, pg.group, 1, 1.0)
    assert b.try_lead() is None  # b's connection was ended: logged, dropped
    assert wait_for(b.info, timeout=20, what="b connected again")


def test_two_routers_starting_at_once_exactly_one_leads(pg: PG) -> None:
    for group in [pg.other_group(str(i)) for i in range(5)]:
        racers = [pg.lease(f"m{i}", group=group) for i in range(4)]
        start = threading.Barrier(len(racers))
        results: list[int | None] = [None] * len(racers)

        def race(i: int, lease: Lease, start: threading.Barrier, results: list[int | None]) -> None:
            start.wait()
            results[i] = lease.try_lead()

        threads = [
            threading.Thread(target=race, args=(i, x, start, results)) for i, x in enumerate(racers)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(results, key=str) == [1, None, None, None], (group, results)
        info = racers[0].info()
        assert info is not None and info.member == f"m{results.index(1)}"


def test_ensure_lease_table_is_idempotent_and_safe_at_once(pg: PG) -> None:
    conns = [pg.connect(autocommit=True) for _ in range(4)]
    start = threading.Barrier(len(conns))
    errors: list[BaseException] = []

    def create(conn: psycopg.Connection[Any]) -> None:
        start.wait()
        try:
            for _ in range(3):
                with conn.cursor() as cur:
                    ensure_lease_table(cur, pg.group)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=create, args=(c,)) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    # Inside a caller's open transaction it works too (a savepoint), and commits with it.
    journal = pg.connect()
    with journal.cursor() as cur:
        ensure_lease_table(cur, pg.group)
    journal.commit()


@pytest.mark.parametrize("group", ["", "Default", "a-b", "x" * 41, 'g";drop', "é"])
def test_an_invalid_group_name_says_how_to_fix_it(pg: PG, group: str) -> None:
    with pytest.raises(ConfigurationError, match="1 to 40 characters from a-z, 0-9 and _"):
        Lease(pg.dsn, group, "a")
    with pytest.raises(ConfigurationError), psycopg.connect(pg.dsn) as conn, conn.cursor() as cur:
        ensure_lease_table(cur, group)
    with pytest.raises(ConfigurationError), psycopg.connect(pg.dsn) as conn, conn.cursor() as cur:
        fence(cur, group, 1, 5.0)


def test_group_name_at_the_limit_works(pg: PG) -> None:
    group = pg.other_group("_" * 40)
    assert len(group) == 40
    assert pg.lease("a", group=group).try_lead() == 1


@pytest.mark.parametrize(
    ("dsn", "seconds", "member", "says"),
    [
        ("postgresql://postgres@127.0.0.1:5432/test", 0, "a", "lease_seconds"),
        ("postgresql://postgres@127.0.0.1:5432/test", -1.0, "a", "lease_seconds"),
        ("postgresql://postgres@127.0.0.1:5432/test", 5.0, "", "member"),
        ("host=127.0.0.1 port", 5.0, "a", "postgresql://user@host:port/database"),
    ],
)
def test_bad_lease_settings_say_how_to_fix_them(
    dsn: str, seconds: float, member: str, says: str
) -> None:
    with pytest.raises(ConfigurationError, match=says):
        Lease(dsn, "default", member, lease_seconds=seconds)


@pytest.mark.parametrize("where", ["nothing listening", "no such database"])
def test_unreachable_none_and_one_log_line(
    pg: PG, caplog: pytest.LogCaptureFixture, where: str
) -> None:
    if where == "nothing listening":
        server = f"127.0.0.1:{free_port()}/test"
    else:
        server = "127.0.0.1:5432/emq_no_such_database"
    lease = pg.lease("a", dsn=f"postgresql://postgres@{server}?connect_timeout=5")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for _ in range(5):
            assert lease.try_lead() is None
        assert lease.info() is None
        lease.release(1)  # never raises
    warnings = [r for r in caplog.records if r.name == LOGGER]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert warnings[0].levelno == logging.WARNING
    assert server in warnings[0].getMessage()


def test_nothing_listening_a_reminder_after_remind_seconds(
    pg: PG, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(leadership, "REMIND_SECONDS", 0.0)
    lease = pg.lease("a", dsn=f"postgresql://postgres@127.0.0.1:{free_port()}/test")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert lease.try_lead() is None
        assert lease.try_lead() is None
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(messages) == 2 and "(still)" in messages[1], messages


def test_failovers_count_every_takeover(pg: PG) -> None:
    members = [pg.lease(f"m{i}") for i in range(3)]
    assert members[0].try_lead() == 1
    for n in range(1, 5):
        old, new = members[(n - 1) % 3], members[n % 3]
        old.release(n)
        assert new.try_lead() == n + 1
        info = new.info()
        assert info is not None
        assert (info.epoch, info.member, info.failovers) == (n + 1, f"m{n % 3}", n)
        assert info.last_failover_seconds is not None and info.last_failover_seconds > 0


def test_two_groups_do_not_interfere(pg: PG) -> None:
    other = pg.other_group("2")
    a1, b1 = pg.lease("a1"), pg.lease("b1")
    a2, b2 = pg.lease("a2", group=other), pg.lease("b2", group=other)
    assert a1.try_lead() == 1
    assert a2.try_lead() == 1
    journal = pg.connect()
    renew(journal, pg.group, 1, 60.0)
    renew(journal, other, 1, 60.0)
    a1.release(1)
    assert b2.try_lead() is None  # the other group's release does not free this one
    assert b1.try_lead() == 2
    with pytest.raises(LeadershipLost):
        renew(journal, pg.group, 1, 60.0)
    journal.rollback()
    renew(journal, other, 1, 60.0)  # still ours there
    i1, i2 = a1.info(), a2.info()
    assert i1 is not None and (i1.group, i1.epoch, i1.member) == (pg.group, 2, "b1")
    assert i2 is not None and (i2.group, i2.epoch, i2.member, i2.failovers) == (
        other,
        1,
        "a2",
        0,
    )


def test_a_dropped_schema_is_created_again(pg: PG) -> None:
    a = pg.lease("a")
    assert a.try_lead() == 1
    journal = pg.connect()
    drop_group(pg.dsn, pg.group)
    with pytest.raises(LeadershipLost, match="gone"):
        renew(journal, pg.group, 1, 60.0)
    journal.rollback()
    b = pg.lease("b")
    assert a.try_lead() is None  # its table is gone: logged, connection dropped
    assert wait_for(lambda: a.try_lead() or b.try_lead(), timeout=20, what="a new leader") == 1
