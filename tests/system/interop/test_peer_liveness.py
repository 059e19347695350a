"""Peers stay registered while busy, and a peer the router forgot registers again.

Real processes: our router with our job manager, the reference 0.3.13 job
manager and the reference scheduler. "Forgot": the router restarted on the
same addresses, so a peer's socket reconnects to a router that never saw its
INFORM. Our router answers a job manager's message with DISCONNECT (ours and
the reference's then INFORM again) and takes a scheduler back on its
HEARTBEAT (DISCONNECT would make the reference scheduler exit). The busy
scheduler's case, with the job manager and the database it needs, is in
``tests/scheduling/test_processes.py``.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import Proc, wait_for

from .conftest import (
    INTEROP,
    OUR_DEADLINE,
    REFERENCE_DEADLINE,
    Router,
    read_records,
    start_our_jobmanager,
    start_our_router,
    start_reference_jobmanager,
    start_reference_scheduler,
    wait_records,
)
from .refjobs.record import record, record_then_wait

pytestmark = INTEROP

#: Short heartbeats for our processes: several timeouts pass in seconds.
INTERVAL, TIMEOUT = 0.5, 1.5
SHORT = {"EMQ_HEARTBEAT_INTERVAL": str(INTERVAL), "EMQ_HEARTBEAT_TIMEOUT": str(TIMEOUT)}
#: A job manager that would wait long for a silent router: stopped past the router's
#: timeout, it learns it was dropped only from the router's answer (DISCONNECT).
PATIENT = {**SHORT, "EMQ_HEARTBEAT_TIMEOUT": "60"}


@pytest.fixture
def routers() -> Iterator[list[Router]]:
    """The routers a test starts (restarts included), stopped at the end."""
    started: list[Router] = []
    yield started
    for router in started:
        router.stop()


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    """Peer processes a test starts, stopped at the end."""
    started: list[Proc] = []
    yield started
    for proc in started:
        proc.stop()


def ask(router: Router, command: str) -> dict[str, Any]:
    """``command`` on the router's admin socket (one socket per router, however often)."""
    admin = router.admins[0] if router.admins else router.admin()
    return admin.call(command)


def workers(router: Router) -> list[str]:
    return list(ask(router, "ROUTER_SHOW_WORKERS")["connected_workers"])


def schedulers(router: Router) -> list[str]:
    return list(ask(router, "ROUTER_SHOW_SCHEDULERS")["connected_schedulers"])


def a_job_runs(records_file: Path, timeout: float = OUR_DEADLINE) -> list[list[Any]]:
    """A job sent now (our client, pointed at the router by ``use_broker``) runs;
    returns the arguments of every job recorded by then."""
    record.delay("after", out=str(records_file))
    done: list[list[Any]] = wait_for(
        lambda: (
            (runs := [r["args"] for r in read_records(records_file)]) and ["after"] in runs and runs
        ),
        timeout,
        "a job sent after it registered again",
    )
    return done


def dropped_while_stopped(
    router: Router,
    jobmanager: Proc,
    meanwhile: Callable[[], object] = lambda: None,
    running: int = 0,
) -> None:
    """Stop the job manager (SIGSTOP) until the router drops it, ``running`` jobs of
    it handed out again; call ``meanwhile``, let it run (SIGCONT) and wait until it
    registered again under a new identity, told so by the router's DISCONNECT."""
    (before,) = workers(router)
    jobmanager.signal(signal.SIGSTOP)
    try:
        dropped = re.escape(f"worker {before} dropped (silent for more than")
        if running:
            dropped += rf".*: {running} in-flight job"
        router.proc.wait_output(dropped)
        meanwhile()
    finally:
        jobmanager.signal(signal.SIGCONT)
    (after,) = wait_for(
        lambda: (now := workers(router)) and now != [before] and now,
        20,
        "the job manager registered again",
        poll=0.1,
    )
    assert after.startswith("jm-")
    # Whichever it sends first after SIGCONT (RUNNING and QUEUED are our extensions).
    first = "(HEARTBEAT|READY|DONE|RUNNING|QUEUED)"
    told = rf"{first} before INFORM from {re.escape(before)}; told to DISCONNECT"
    assert re.search(told, router.proc.output())
    assert "the router sent DISCONNECT; reconnecting" in jobmanager.output()


def restart(routers: list[Router], env: dict[str, str] | None = None) -> Router:
    """Stop the last router and start a new one on its addresses."""
    old = routers[-1]
    old.stop()
    new = start_our_router(env, like=old)
    routers.append(new)
    return new


def test_a_busy_jobmanager_stays_registered_over_several_timeouts(
    routers: list[Router],
    procs: list[Proc],
    records_file: Path,
    use_broker: Callable[[str], None],
) -> None:
    """Jobs flow all the time (REQUESTs in, DONEs out): each counts as a heartbeat on
    both sides, so over three heartbeat timeouts nobody is dropped or reconnects."""
    router = start_our_router(SHORT)
    routers.append(router)
    procs.append(start_our_jobmanager(router.backend, SHORT))
    use_broker(router.frontend)
    (identity,) = workers(router)
    sent = 0
    until = time.monotonic() + 3 * TIMEOUT

    def flowing() -> bool:
        nonlocal sent
        record.delay(sent, out=str(records_file))
        sent += 1
        assert workers(router) == [identity], "the job manager was dropped or reconnected"
        return time.monotonic() > until

    wait_for(flowing, 30, "three heartbeat timeouts of jobs", poll=0.02)
    wait_records(records_file, sent)
    assert len(read_records(records_file)) == sent
    assert ask(router, "STATUS")["heartbeats_missed"] == 0
    output = router.proc.output() + procs[0].output()
    assert "dropped" not in output and "lost the router" not in output


def test_our_jobmanager_registers_again_with_a_restarted_router(
    routers: list[Router],
    procs: list[Proc],
    records_file: Path,
    use_broker: Callable[[str], None],
) -> None:
    routers.append(start_our_router(SHORT))
    procs.append(start_our_jobmanager(routers[0].backend, SHORT))
    router = restart(routers, SHORT)
    wait_for(lambda: workers(router), 20, "our job manager registered again", poll=0.1)
    use_broker(router.frontend)
    assert a_job_runs(records_file) == [["after"]]


def test_a_jobmanager_the_router_dropped_registers_again(
    routers: list[Router],
    procs: list[Proc],
    records_file: Path,
    use_broker: Callable[[str], None],
) -> None:
    """Stopped (SIGSTOP) past the timeout, it is dropped; once it runs again its next
    message gets DISCONNECT and it INFORMs again (a new socket, so a new identity)."""
    router = start_our_router(SHORT)
    routers.append(router)
    jobmanager = start_our_jobmanager(router.backend, PATIENT)
    procs.append(jobmanager)
    dropped_while_stopped(router, jobmanager)
    use_broker(router.frontend)
    assert a_job_runs(records_file) == [["after"]]


def test_a_busy_jobmanager_the_router_dropped_reports_its_job_and_registers_again(
    routers: list[Router],
    procs: list[Proc],
    records_file: Path,
    use_broker: Callable[[str], None],
    tmp_path: Path,
) -> None:
    """Dropped (SIGSTOP past the timeout) while it runs a job, whose run ends while
    it is stopped: once it runs again it is told to DISCONNECT and INFORMs again,
    and the job is finished once (its run's DONE or the run of the copy handed out
    again, whichever comes first), not lost nor left waiting."""
    router = start_our_router(SHORT)
    routers.append(router)
    jobmanager = start_our_jobmanager(router.backend, PATIENT)
    procs.append(jobmanager)
    use_broker(router.frontend)
    gate = tmp_path / "gate"
    record_then_wait.delay("busy", out=str(records_file), gate=str(gate))
    wait_records(records_file)  # it runs
    dropped_while_stopped(router, jobmanager, gate.touch, running=1)
    # The job is finished for good, once, in the router's books (its run, or the
    # copy handed out again: whichever reports first; at least once, not lost).
    status = wait_for(
        lambda: (s := ask(router, "STATUS"))["finished_messages_by_queue"] and s,
        20,
        "the job finished",
        poll=0.1,
    )
    assert status["finished_messages_by_queue"] == {"default": {"ok": 1}}
    assert status["waiting_messages_by_queue"] == {} and status["inflight_messages_by_queue"] == {}
    a_job_runs(records_file)


def test_the_reference_jobmanager_registers_again_with_a_restarted_router(
    routers: list[Router],
    procs: list[Proc],
    records_file: Path,
    use_broker: Callable[[str], None],
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its HEARTBEAT to the new router gets DISCONNECT: it INFORMs again (its
    DISCONNECT handler fails, and it reconnects after the failure)."""
    routers.append(start_our_router())
    # Its next HEARTBEAT is what meets the new router: every second, not every
    # 3 s (the reference's default), comes sooner and proves the same.
    monkeypatch.setenv("EVENTMQ_HEARTBEAT_INTERVAL", "1")
    jobmanager = start_reference_jobmanager(routers[0].backend, workdir)
    procs.append(jobmanager)
    wait_for(lambda: workers(routers[0]), REFERENCE_DEADLINE, "the reference job manager", poll=0.1)
    router = restart(routers)
    wait_for(lambda: workers(router), REFERENCE_DEADLINE, "it registered again", poll=0.1)
    use_broker(router.frontend)
    assert a_job_runs(records_file, REFERENCE_DEADLINE) == [["after"]]
    assert jobmanager.popen.poll() is None


def test_the_reference_scheduler_is_taken_back_by_a_restarted_router(
    routers: list[Router], procs: list[Proc], workdir: Path
) -> None:
    """Its HEARTBEAT without INFORM registers it again, under the same identity: it
    is not told DISCONNECT (it would exit) nor left to find out by itself."""
    routers.append(start_our_router())
    scheduler = start_reference_scheduler(routers[0].frontend, workdir)
    procs.append(scheduler)
    (identity,) = wait_for(
        lambda: schedulers(routers[0]), REFERENCE_DEADLINE, "it registered", poll=0.1
    )
    router = restart(routers)
    taken_back = wait_for(
        lambda: schedulers(router), REFERENCE_DEADLINE, "it registered again", poll=0.1
    )
    assert taken_back == [identity]
    assert scheduler.popen.poll() is None
    assert "registered again: a HEARTBEAT without INFORM" in router.proc.output()
