"""A job manager or scheduler with several router addresses talks to one router at a time.

Fake routers (tests/fake_router.py) stand for a group's members: one that
accepts the connection but never answers (a router paused or overloaded),
one that goes away while a job runs, and the one that takes over.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from django_eventmq.protocol import Disconnect, Done, Features, Inform, Ready, new_msgid
from django_eventmq.protocol.features import HOLDING
from django_eventmq.runtime.addresses import HANDSHAKE_WAIT
from django_eventmq.runtime.settings import Settings
from django_eventmq.scheduling.scheduler import Scheduler
from tests.fake_router import FakeRouter, body
from tests.jobs_fixtures.running import running, settings_for
from tests.scheduling.fakes import MemoryStore
from tests.support import tcp_addr, wait_for

FAST = {"heartbeat_interval": 0.5, "heartbeat_timeout": 3.0, "reconnect_max_delay": 1.0}


def _lines(path: Path) -> list[str]:
    return path.read_text().split("\n")[:-1] if path.exists() else []


def test_a_router_that_never_acks_is_left_for_the_next_address() -> None:
    silent, live = FakeRouter(), FakeRouter()
    try:
        settings = settings_for(live, worker_addr=f"{silent.addr},{live.addr}", **FAST)
        with running(settings) as jm:
            silent.expect(Inform)  # it came, and nobody answers it
            identity, _ = live.handshake(features=True)
            live.expect(Features)
            wait_for(lambda: jm.connected, 10, "the job manager connected to the live router")
            assert jm.link.addr == live.addr
            live.wait_count(Ready, 1, identity)
            silent.pump(0.05)
            # One router at a time: no READY (nor anything else but the INFORM and
            # the heartbeats of the wait) reached the silent one.
            assert {m.command for _, m in silent.received} <= {"CONSUMED", "HEARTBEAT"}
    finally:
        silent.close()
        live.close()
    assert FAST["heartbeat_timeout"] > HANDSHAKE_WAIT  # it left before a heartbeat timeout


def test_a_router_gone_silent_with_its_connection_up_is_left_for_the_next_address() -> None:
    """A paused router (SIGSTOP) keeps its connections: silence past the heartbeat
    timeout moves the job manager on, and the READYs go to the next router only."""
    paused, live = FakeRouter(), FakeRouter()
    try:
        settings = settings_for(
            live,
            worker_addr=f"{paused.addr},{live.addr}",
            heartbeat_interval=0.3,
            heartbeat_timeout=1.0,
            reconnect_max_delay=1.0,
        )
        with running(settings) as jm:
            identity, _ = paused.handshake(features=True)
            paused.expect(Features)
            paused.wait_count(Ready, 1, identity)
            # From now on the paused router sends nothing (no HEARTBEAT either).
            live_identity, _ = live.handshake(features=True)
            live.expect(Features)
            live.wait_count(Ready, 1, live_identity)
            assert jm.link.addr == live.addr and jm.link.heartbeats_missed == 1
            readies = paused.count(Ready, identity)
            paused.pump(0.05)
            assert paused.count(Ready, identity) == readies
    finally:
        paused.close()
        live.close()


def test_after_a_failover_the_new_router_hears_the_running_job_and_it_runs_once(
    tmp_path: Path,
) -> None:
    old, new = FakeRouter(), FakeRouter()
    track = tmp_path / "slow.txt"
    try:
        settings = settings_for(old, worker_addr=f"{old.addr},{new.addr}", **FAST)
        with running(settings) as jm:
            identity, _ = old.handshake(features=True)
            old.expect(Features)
            old.wait_count(Ready, 1, identity)
            msgid = old.request(identity, body("slow", 2.0, str(track)))
            wait_for(lambda: _lines(track), 20, "the slow job to start")
            old.close()  # the old leader dies: its connection drops
            new_identity, _ = new.handshake(features=True)
            _, answer = new.expect(Features)
            assert answer.features[HOLDING] == [msgid]
            # A router that recovered the job as waiting hands it out again.
            new.wait_count(Ready, 1, new_identity)
            new.request(new_identity, body("slow", 2.0, str(track)), msgid=msgid)
            [(_, done)] = new.wait_for(Done, timeout=20)
            assert done.job_msgid == msgid and done.status == "ok"
            assert jm.link.addr == new.addr
        new.pump(0.05)
        assert new.count(Done) == 1
        assert [line.split()[0] for line in _lines(track)] == ["start", "done"]
    finally:
        new.close()


def test_a_scheduler_skips_an_address_where_nothing_listens() -> None:
    router = FakeRouter()
    dead = tcp_addr()
    settings = Settings(broker_addr=f"{dead},{router.addr}", **FAST)  # type: ignore[arg-type]
    scheduler = Scheduler(settings, MemoryStore(), poll_interval=0.05, grace=30)
    now = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
    try:

        def tick() -> list[bytes]:
            scheduler.loop_once(now=now, timeout=0.01)
            router.pump(0.01)
            return router.ack_informs()

        wait_for(tick, 10, "the scheduler's INFORM at the second address")
        wait_for(
            lambda: (scheduler.loop_once(now=now, timeout=0.01), scheduler.connected)[1],
            10,
            "the scheduler registered",
        )
        assert scheduler.addresses.current == router.addr
        assert scheduler.channel is not None and scheduler.channel.address == router.addr
    finally:
        scheduler.close()
        router.close()


def test_a_job_finished_while_no_router_was_connected_is_named_as_held(
    tmp_path: Path,
) -> None:
    """A job that finishes between two connections has its DONE waiting in the job
    manager: the next router is told it holds the job (its outcome comes), so it
    does not hand it out again."""
    old, new = FakeRouter(), FakeRouter()
    log, gate = tmp_path / "log.txt", tmp_path / "gate"
    gated = "tests.jobs_fixtures.gated"
    try:
        settings = settings_for(
            old, worker_addr=f"{old.addr},{new.addr}", job_modules=(gated,), **FAST
        )
        with running(settings) as jm:
            identity, _ = old.handshake(features=True)
            old.expect(Features)
            old.wait_count(Ready, 1, identity)
            msgid = old.request(identity, body("gated", str(log), "j", str(gate), path=gated))
            wait_for(lambda: _lines(log), 20, "the job to start")
            old.send(identity, Disconnect(msgid=new_msgid()))
            wait_for(lambda: jm.link.addr == new.addr, 20, "the job manager to leave")
            gate.touch()  # it finishes while the job manager reconnects (0.1 s later)
            new.handshake(features=True)
            _, answer = new.expect(Features)
            assert answer.features[HOLDING] == [msgid]
            [(_, done)] = new.wait_for(Done, timeout=20)
            assert done.job_msgid == msgid and done.status == "ok"
        assert [line.split()[0] for line in _lines(log)] == ["start", "done"]
    finally:
        old.close()
        new.close()
