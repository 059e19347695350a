"""A job that ends as its job manager stops is reported once: the DONEs queued on
the socket reach the router before the socket closes (real router, job manager and
children on loopback).

The router is paused (SIGSTOP) while the jobs end, as a busy router is for a
moment: the DONEs, big enough to fill the connection's buffers, wait on the job
manager's socket, which the job manager then closes. Closed at once (``linger=0``)
it dropped them, and the router handed the jobs out again.
"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

from django_eventmq.client.connection import Client
from django_eventmq.protocol import Headers, Request, new_msgid
from tests.fake_router import body
from tests.jobmanager.test_autoscale_live import GATED, Stack, _alive, stack
from tests.support import wait_for

__all__ = ["stack"]

#: Jobs per round, and the characters each returns: together well past what a
#: loopback connection buffers while the router does not read.
JOBS = 4
REPLY = 8 * 1024 * 1024
ROUNDS = 2


def send_gated(stack: Stack, gate: Path) -> str:
    if stack.client is None:
        stack.client = Client(stack.frontend)
    msgid = new_msgid()
    text = body("gated_value", str(stack.log), msgid, str(gate), REPLY, path=GATED)
    stack.client.send(Request(msgid=msgid, queue="default", headers=Headers(), body_text=text))
    return msgid


def stop_as_jobs_end(stack: Stack, gate: Path) -> list[str]:
    """One round: a job manager whose jobs end as it stops, the router paused; the msgids."""
    router = stack.procs[0]
    jm = stack.jobmanager("--concurrency", str(JOBS), "--job-module", GATED)
    msgids = {send_gated(stack, gate) for _ in range(JOBS)}
    wait_for(lambda: {m for m, _ in stack.lines("start")} >= msgids, 60, "the jobs started")
    pids = {pid for m, pid in stack.lines("start") if m in msgids}
    router.signal(signal.SIGSTOP)
    try:
        gate.touch()
        jm.signal(signal.SIGTERM)
        # The jobs ended, their DONEs were sent, and the job manager stopped its
        # children: all that is left is closing its socket.
        wait_for(lambda: not any(map(_alive, pids)), 60, "the children stopped")
    finally:
        router.signal(signal.SIGCONT)
    assert jm.popen.wait(60) == 0
    return sorted(msgids)


def test_jobs_that_end_as_the_job_manager_stops_run_once(stack: Stack, tmp_path: Path) -> None:
    sent: list[str] = []
    for round_ in range(ROUNDS):
        sent += stop_as_jobs_end(stack, tmp_path / f"gate-{round_}")
    # A job manager for the jobs handed out again, if any were.
    stack.jobmanager("--concurrency", "2", "--job-module", GATED)
    wait_for(lambda: stack.processed() == len(sent), 90, f"{len(sent)} jobs processed")
    runs = Counter(m for m, _ in stack.lines("done"))
    assert runs == Counter(sent), runs  # every job ran once
