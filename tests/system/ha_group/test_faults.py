"""Faults around a router group on the real PostgreSQL of this machine (issue 19).

- SIGKILL of the leader while a guaranteed bulk sender (``Client.send_many``, the
  pipeline of ``client/bulk.py``) sends ``JOBS`` jobs to both members' addresses and
  one job manager with 2 workers (``WORKER_ADDR`` = both members' backends) runs
  them: the standby leads, no job is lost, and the failover time and the duplicates
  are printed (``pytest -s -k sigkill``).
- ``pg_terminate_backend`` of a *standby's* lease connection: it connects again by
  itself, stays standby, and leads when the leader is then stopped.
- A restart of PostgreSQL itself with a leader and a standby running and no job in
  flight: one of them leads again and a guaranteed job sent afterwards runs; no
  process exited. The server restarted is one of the test's own
  (:class:`tests.pg_support.PrivateServer`), never the machine's.

Every job appends its msgid to a file (``tests.system.chaos.jobs``): a job ran when
its msgid is there, and ran twice when it is there twice.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import pytest

from django_eventmq.client.connection import Client
from tests.pg_support import DSN, PrivateServer, started_at
from tests.pg_support import private_pg as private_pg
from tests.support import Proc, python_module, wait_for
from tests.system.chaos.support import JOB_PATH, LOG_LEVEL, body, recorded, wait_recorded
from tests.system.ha_group.conftest import running_group
from tests.system.ha_group.support import Group, Member, ready_at

#: Guaranteed jobs sent in the SIGKILL test (the test takes about 6 s here: 2 cores).
JOBS = 10_000
#: Jobs per send_many call: the sender stays at most two of these ahead of the runs,
#: so sending, running and the kill overlap.
BATCH = 500
#: Jobs per BATCH message: a send_many call is several messages, so the kill can
#: land between them.
SEND_BATCH = 50
#: The leader is killed in the middle of a send once this many jobs ran.
KILL_AFTER = JOBS // 3

pytestmark = pytest.mark.postgres


@pytest.fixture
def group(pg_dsn: str, pg_group: str, tmp_path: Path) -> Iterator[Group]:
    with running_group(pg_dsn, pg_group, tmp_path) as made:
        yield made


def start_jobmanager(group: Group) -> Proc:
    """One job manager, 2 workers, given both members' backends as ``WORKER_ADDR``."""
    proc = Proc(
        python_module(
            "jobmanager",
            "--concurrency",
            "2",
            "--job-module",
            JOB_PATH,
            "--log-level",
            LOG_LEVEL,
        ),
        env={**group.env, "EMQ_WORKER_ADDR": f"{group.a.backend},{group.b.backend}"},
    )
    group.procs.append(proc)
    return proc


def frontends(group: Group) -> str:
    return f"{group.a.frontend},{group.b.frontend}"


def send_guaranteed(addr: str, msgids: list[str], *, give_up: float = 60) -> int:
    """Send ``msgids`` as guaranteed jobs through ``addr`` until all are ACKed; resends."""
    client = Client(addr, send_timeout=30)
    try:
        result = client.send_many(
            [(m.encode(), b"default", b"guarantee", body(m)) for m in msgids],
            ack_timeout=0.5,
            give_up=give_up,
        )
    finally:
        client.close()
    assert result.acked == len(msgids), result.rejected
    return result.resent


# -- 1. SIGKILL of the leader under load -----------------------------------------------


def test_sigkill_of_the_leader_while_jobs_are_sent_loses_none(group: Group) -> None:
    start_jobmanager(group)
    msgids = [f"k-{i}" for i in range(JOBS)]
    probe = "k-probe"
    figures: dict[str, float] = {}
    armed = threading.Event()

    def ran() -> int:
        return len(recorded(group.record))

    def arm() -> None:
        with contextlib.suppress(AssertionError):  # the sender then fails on "killed"
            wait_for(lambda: ran() >= KILL_AFTER, 60, f"{KILL_AFTER} jobs to run", poll=0.01)
            armed.set()

    def measure(killed: float) -> None:
        # The first ACK after the kill: one guaranteed job resent until acknowledged.
        send_guaranteed(frontends(group), [probe])
        figures["ack"] = time.time() - killed
        group.b.proc.wait_output("router ready", 30)
        figures["ready"] = ready_at(group.b.proc) - killed

    threads = [threading.Thread(target=arm, name="arm")]
    threads[0].start()

    def jobs(batch: list[str]) -> Iterator[tuple[bytes, bytes, bytes, bytes]]:
        """The batch's jobs; once armed, A is killed in the middle of a batch: the
        pipeline has sent (and maybe not yet had ACKed) the first half to A."""
        for i, m in enumerate(batch):
            if i == len(batch) // 2 and armed.is_set() and "killed" not in figures:
                group.a.proc.signal(signal.SIGKILL)
                figures["killed"] = killed = time.time()
                figures["lines_at_kill"] = ran()
                figures["kill_batch"] = int(batch[0].split("-")[1])
                threads.append(threading.Thread(target=measure, args=(killed,), name="probe"))
                threads[-1].start()
            yield m.encode(), b"default", b"guarantee", body(m)

    client = Client(frontends(group), send_timeout=30)
    resent = 0
    try:
        for start in range(0, JOBS, BATCH):

            def caught_up(behind: int = start - 2 * BATCH) -> bool:
                return ran() > behind

            wait_for(caught_up, 60, "the job manager to catch up")
            batch = msgids[start : start + BATCH]
            result = client.send_many(
                jobs(batch), window=BATCH, batch=SEND_BATCH, ack_timeout=0.5, give_up=60
            )
            assert result.acked == len(batch), result.rejected
            resent += result.resent
        assert "killed" in figures, f"A was not killed: only {ran()} jobs ran while sending"
        lines = wait_recorded(group.record, {*msgids, probe}, timeout=60)
    finally:
        client.close()
        for thread in threads:
            thread.join(60)

    counts = Counter(lines)
    twice = sorted(m for m in msgids if counts[m] > 1)
    at_kill = int(figures["lines_at_kill"])
    before_kill = set(lines[:at_kill])
    # Where each duplicate first ran: before the kill, or just after it (a job A had
    # handed out that finished while A was gone).
    first_before = sum(1 for m in twice if m in before_kill)
    # Jobs from the first half of the batch being sent at the kill on went to A only
    # if they were before that point; later ones reached B alone.
    sent_to_a = int(figures["kill_batch"]) + BATCH // 2
    print(
        f"\nrouter group SIGKILL of the leader, {JOBS} guaranteed jobs (send_many, BATCH "
        f"messages of {SEND_BATCH}), 1 job manager with 2 workers, killed in the middle of a "
        f"send after {at_kill} runs: kill -> new leader ready {figures['ready']:.3f} s, "
        f"kill -> first ACK {figures['ack']:.3f} s; lost 0; {resent} job(s) resent by the "
        f"sender (unACKed by A); {len(twice)} job(s) ran twice ({first_before} first ran "
        f"before the kill, {len(twice) - first_before} just after it; all sent to A before "
        f"the kill, {sum(1 for m in twice if int(m[2:]) < sent_to_a - BATCH // 2)} of them "
        f"ACKed by A in an earlier batch): jobs A had handed out whose DONE it had not "
        f"committed when it died (received before the kill but not yet in a commit, or "
        f"sent by the job manager after it), so B found them handed out in the journal "
        f"and handed them out again"
    )
    assert set(msgids) <= set(counts)  # none lost
    assert max(counts.values()) <= 2, counts.most_common(3)  # one failover: twice at most
    # Only jobs A had been sent can have run twice: what B alone took ran once.
    assert all(int(m.split("-")[1]) < sent_to_a for m in twice), twice[-5:]
    # Every second run was the new leader's: it came after the kill.
    after_kill = Counter(lines[at_kill:])
    assert all(after_kill[m] >= 1 for m in twice)
    status = group.b.status()
    assert (status["role"], status["epoch"], status["failovers"]) == ("leader", 2, 1)


# -- 2. A standby's PostgreSQL connection killed -----------------------------------------


def lease_backend(group: Group, member: Member) -> int | None:
    """The PostgreSQL backend pid of ``member``'s lease connection (None: not connected).

    Both members' lease connections have the same application_name; the standby's is
    the one whose client port is a socket of the standby's process.
    """
    ports = [
        c.laddr.port
        for c in psutil.Process(member.proc.pid).net_connections(kind="tcp")
        if c.raddr and c.raddr.port == 5432 and c.status == psutil.CONN_ESTABLISHED
    ]
    if not ports:
        return None
    with psycopg.connect(group.dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
            " AND client_port = ANY(%s)",
            (f"emq_router {group.group} lease", ports),
        ).fetchone()
    return None if row is None else int(row[0])


def test_a_standby_whose_connection_is_killed_reconnects_and_still_takes_over(
    group: Group,
) -> None:
    start_jobmanager(group)
    before = wait_for(lambda: lease_backend(group, group.b), 10, "B's lease connection")
    with psycopg.connect(group.dsn, autocommit=True) as conn:
        assert conn.execute("SELECT pg_terminate_backend(%s)", (before,)).fetchone() == (True,)
    # B finds out at its next poll, says so, and connects again by itself.
    group.b.proc.wait_output(r"PostgreSQL at \S+: AdminShutdown: terminating connection", 10)
    group.b.proc.wait_output(r"PostgreSQL at \S+ answers again", 10)
    after = wait_for(
        lambda: (pid := lease_backend(group, group.b)) not in (None, before) and pid,
        10,
        "B's new lease connection",
    )
    assert after != before
    assert (group.a.role(), group.b.role()) == ("leader", "standby")
    assert group.lease_row()[0] == 1  # type: ignore[index]  # A still holds epoch 1
    # The leader stops: B, with its new connection, takes over and serves.
    assert group.a.proc.stop() == 0
    wait_for(lambda: group.b.role() == "leader", 20, "B to lead after A stopped")
    assert group.b.status()["epoch"] == 2
    send_guaranteed(frontends(group), ["after-standby-reconnect"])
    wait_recorded(group.record, {"after-standby-reconnect"}, timeout=20)
    assert group.b.proc.popen.poll() is None


# -- 3. PostgreSQL restarted under the group ---------------------------------------------


def postgres_ready(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


@pytest.fixture
def private_group(private_pg: PrivateServer, tmp_path: Path) -> Iterator[Group]:
    """A group on a PostgreSQL server of this test's own: it restarts that one, never the
    machine's (which the other tests, and whatever else runs here, share)."""
    with running_group(private_pg.dsn, "restarted", tmp_path) as made:
        yield made


def test_a_postgresql_restart_is_survived_by_leader_and_standby(
    private_pg: PrivateServer, private_group: Group
) -> None:
    group = private_group
    machines = started_at(DSN)  # None: no server here, nothing to compare
    jobmanager = start_jobmanager(group)
    send_guaranteed(frontends(group), ["before-restart"])
    wait_recorded(group.record, {"before-restart"}, timeout=20)  # nothing in flight now
    old_epoch = group.lease_row()[0]  # type: ignore[index]
    first_start = started_at(group.dsn)

    private_pg.pg_ctl("restart")
    wait_for(lambda: postgres_ready(group.dsn), 60, "PostgreSQL to be up after its restart")
    assert started_at(group.dsn) != first_start  # it did restart

    # The leader's journal connection died with the server: it steps down, and
    # whichever member polls first once the server is back wins a newer epoch.
    def leader() -> Member | None:
        roles = {m.name: m.role() for m in (group.a, group.b)}
        leaders = [m for m in (group.a, group.b) if roles[m.name] == "leader"]
        return leaders[0] if len(leaders) == 1 else None

    new = wait_for(leader, 60, "one member to lead again after the restart", poll=0.2)
    row = group.lease_row()
    assert row is not None and row[0] > old_epoch and row[1] == new.status()["member"], row
    send_guaranteed(frontends(group), ["after-restart"], give_up=60)
    wait_recorded(group.record, {"after-restart"}, timeout=30)
    other = group.b if new is group.a else group.a
    assert other.role() == "standby"
    for proc in (group.a.proc, group.b.proc, jobmanager):
        assert proc.popen.poll() is None, proc.output()[-3000:]
    # The machine's server was left alone.
    assert started_at(DSN) == machines
