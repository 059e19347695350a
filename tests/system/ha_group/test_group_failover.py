"""Two routers of one group on a real PostgreSQL journal: one leads, one stands by.

- The standby binds nothing (a client connecting to its frontend gets no handshake).
- SIGKILL of the leader while a guaranteed bulk sender sends 2,000 jobs and job
  managers run them: the standby leads, no job is lost, duplicates are counted,
  and the failover time (kill -> new leader's "router ready", -> first ACK) is printed.
- SIGSTOP of the leader past its lease: the standby takes over; on SIGCONT the old
  leader hands out nothing to a worker that said READY while it was stopped, ACKs
  nothing, and stands by.
- pg_terminate_backend of the leader's journal connection: the same.

Peers are given both members' addresses (``BROKER_ADDR`` / ``WORKER_ADDR`` lists),
except the raw sockets that check what the old leader sends.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from django_eventmq.client.connection import Client
from django_eventmq.protocol import Heartbeat, Inform, Ready, Request, new_msgid
from tests.pg_support import pg_dsn, pg_group  # noqa: F401 - fixtures
from tests.support import wait_for
from tests.system.chaos.support import body, recorded, wait_recorded
from tests.system.ha_group.support import Group, Wire, commands, ready_at

JOBS = 2000
BATCH = 200


@pytest.fixture
def group(
    request: pytest.FixtureRequest,
    pg_dsn: str,  # noqa: F811
    pg_group: str,  # noqa: F811
    tmp_path: Path,
) -> Iterator[Group]:
    # A paused router must not drop the raw worker as silent when it resumes: the
    # test is whether it hands it a job, which it would while it believes it leads.
    env = {"EMQ_HEARTBEAT_TIMEOUT": "60"} if "paused" in request.node.name else {}
    made = Group(pg_dsn, pg_group, tmp_path, **env)
    try:
        yield made
    finally:
        made.stop()
        print(made.outputs())  # shown when the test failed


def test_one_leads_and_the_standby_binds_nothing(group: Group) -> None:
    a, b = group.a.status(), group.b.status()
    assert (a["role"], b["role"]) == ("leader", "standby")
    assert a["epoch"] == b["epoch"] == 1
    assert a["leader"] == b["leader"] == a["member"] != b["member"]
    assert group.b.status()["failovers"] == 0
    # A connection to the leader's frontend completes its handshake; to the standby's,
    # connecting is refused and retried (nothing listens).
    assert handshake(group.a.frontend) == "handshake"
    assert handshake(group.b.frontend) == "refused"
    assert handshake(group.b.backend) == "refused"


def handshake(addr: str) -> str:
    """Connect a DEALER to ``addr``: "handshake" once ZMTP completes, "refused" once a
    connection attempt failed (whichever comes first)."""
    ctx: zmq.Context[Any] = zmq.Context.instance()
    sock: zmq.Socket[Any] = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_CONNECT_RETRIED)
    try:
        sock.connect(addr)
        events = {zmq.EVENT_HANDSHAKE_SUCCEEDED: "handshake", zmq.EVENT_CONNECT_RETRIED: "refused"}
        event = wait_for(
            lambda: monitor.poll(100) and recv_monitor_message(monitor)["event"],
            10,
            f"a handshake or a refusal at {addr}",
        )
        return events[event]
    finally:
        sock.disable_monitor()
        monitor.close(linger=0)
        sock.close(linger=0)


def test_sigkill_of_the_leader_under_load_loses_no_job(group: Group) -> None:
    # Every peer is given both members' addresses, as in production.
    frontends = f"{group.a.frontend},{group.b.frontend}"
    group.jobmanager(f"{group.a.backend},{group.b.backend}")
    group.jobmanager(f"{group.b.backend},{group.a.backend}")
    msgids = [f"ha-{i}" for i in range(JOBS)]
    probe = "ha-probe"
    figures: dict[str, float] = {}

    def ran() -> int:
        return len(set(recorded(group.record)))

    def killer() -> None:
        wait_for(lambda: ran() >= JOBS // 3, 120, "a third of the jobs to run", poll=0.02)
        group.a.proc.signal(signal.SIGKILL)
        killed = time.time()
        figures["backlog"] = JOBS - ran()
        # The first ACK after the kill: one guaranteed job, resent until acknowledged.
        client = Client(frontends, send_timeout=30)
        try:
            result = client.send_many(
                [(probe.encode(), b"default", b"guarantee", body(probe))],
                ack_timeout=0.2,
                give_up=60,
            )
            assert result.acked == 1
            figures["ack"] = time.time() - killed
        finally:
            client.close()
        group.b.proc.wait_output("router ready", 30)
        figures["ready"] = ready_at(group.b.proc) - killed

    thread = threading.Thread(target=killer, name="killer")
    thread.start()
    client = Client(frontends, send_timeout=30)
    resent = 0
    try:
        for start in range(0, JOBS, BATCH):
            # Paced by the job managers, so sends and the kill overlap.
            wait_for(lambda s=start: s - ran() < 2 * BATCH, 120, "job managers to catch up")
            batch = msgids[start : start + BATCH]
            result = client.send_many(
                ((m.encode(), b"default", b"guarantee", body(m, 0.001)) for m in batch),
                window=BATCH,
                ack_timeout=1.0,
                give_up=60,
            )
            assert result.acked == len(batch), result.rejected
            resent += result.resent
        thread.join(120)
        lines = wait_recorded(group.record, {*msgids, probe}, timeout=120)
    finally:
        client.close()
        thread.join(1)
    counts = Counter(lines)
    twice = sum(1 for m in msgids if counts[m] > 1)
    status = group.b.status()
    print(
        f"\nrouter group failover (SIGKILL of the leader, {JOBS} guaranteed jobs, "
        f"{figures.get('backlog')} not yet run at the kill): kill -> new leader ready "
        f"{figures['ready']:.3f} s, kill -> first ACK {figures['ack']:.3f} s; the group had "
        f"no leader for {status['last_failover_seconds']:.3f} s (lease row); {resent} "
        f"REQUEST(s) resent; {twice} job(s) ran more than once "
        f"({len(lines) - JOBS - 1} extra runs)"
    )
    assert set(msgids) <= set(counts)  # none lost
    assert (status["role"], status["epoch"], status["failovers"]) == ("leader", 2, 1)
    assert status["leader"] == status["member"]
    assert group.lease_row()[0:2] == (2, status["member"])  # type: ignore[index]


def _waiting(status: dict[str, object]) -> int:
    counts = status.get("waiting_messages_by_queue") or {}
    assert isinstance(counts, dict)
    return sum(counts.values())


def _deposed_sends_nothing(group: Group, depose: object) -> None:
    """Jobs wait in A; a raw worker INFORMs A; A is deposed by ``depose()``; then the
    worker says READY and a raw client sends a REQUEST to A only: A hands out nothing,
    ACKs nothing, and stands by; B holds A's jobs."""
    client = Client(group.a.frontend)
    try:
        result = client.send_many(
            [(f"w-{i}".encode(), b"default", b"guarantee", body(f"w-{i}")) for i in range(10)]
        )
        assert result.acked == 10
    finally:
        client.close()
    worker = Wire(group.a.backend, b"raw-worker")
    wire_client = Wire(group.a.frontend, b"raw-client")
    try:
        worker.send(Inform(msgid=new_msgid(), queues=((10, "default"),)))
        wait_for(lambda: worker.received(0.1), 10, "A's ACK of the raw worker's INFORM")
        assert callable(depose)
        resumed = depose()
        worker.send(Heartbeat(msgid=new_msgid(), timestamp=time.time()))
        worker.send(Ready(msgid=new_msgid()))
        wire_client.send(
            Request(msgid=new_msgid(), queue="default", body_text=body("never").decode())
        )
        if callable(resumed):
            resumed()
        group.a.proc.wait_output("is no longer the leader", 30)
        wait_for(lambda: group.a.role() == "standby", 20, "A to stand by")
        to_worker = commands(worker.received(1.0))
        to_client = commands(wire_client.received(0.5))
    finally:
        worker.close()
        wire_client.close()
    assert set(to_worker) <= {"HEARTBEAT"}, to_worker  # no job handed out
    assert to_client == [], to_client  # no ACK
    b = group.b.status()
    assert (b["role"], b["epoch"]) == ("leader", 2)
    assert _waiting(b) == 10  # A's jobs, in the shared journal
    a = group.a.status()
    assert (a["role"], a["leader"], a["epoch"]) == ("standby", b["member"], 2)


def test_a_leader_paused_past_its_lease_sends_nothing_when_resumed(group: Group) -> None:
    def pause() -> object:
        group.a.proc.signal(signal.SIGSTOP)
        wait_for(lambda: group.b.role() == "leader", 30, "B to take over from the paused A")
        return lambda: group.a.proc.signal(signal.SIGCONT)

    _deposed_sends_nothing(group, pause)


def test_a_leader_whose_journal_connection_dies_steps_down(group: Group) -> None:
    def terminate() -> None:
        with psycopg.connect(group.dsn, autocommit=True) as conn:
            # The lease names the journal's connection once its first fence ran.
            pid = wait_for(
                lambda: conn.execute(
                    f"SELECT l.pid FROM emq_{group.group}.lease l "
                    "JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE a.application_name NOT LIKE '%lease'"
                ).fetchone(),
                10,
                "the journal's connection to hold the lease",
            )[0]
            assert conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
        wait_for(lambda: group.b.role() == "leader", 30, "B to take over")

    _deposed_sends_nothing(group, terminate)
