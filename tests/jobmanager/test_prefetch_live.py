"""Adaptive prefetch seen from a real router (``python -m django_eventmq router`` and
``jobmanager`` on loopback): slow jobs wait at the router, no-op jobs are prefetched.

What the router holds for a job manager is its in-flight jobs plus its free
slots (ROUTER_SHOW_WORKERS). Without prefetch that is at most one per worker
process.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from django_eventmq.client.connection import Client
from django_eventmq.protocol import Headers, Request, new_msgid
from django_eventmq.runtime.admin_client import ask
from django_eventmq.runtime.settings import Settings
from tests.fake_router import SAMPLE, body
from tests.support import Proc, python_module, wait_for

ANY = "tcp://127.0.0.1:*"
CONCURRENCY = 2
CAP = 8


@dataclass
class Stack:
    admin: str
    client: Client

    def send(self, callable_name: str, *args: object) -> None:
        self.client.send(
            Request(
                msgid=new_msgid(),
                queue="default",
                headers=Headers(),
                body_text=body(callable_name, *args),
            )
        )

    def ask(self, command: str) -> dict[str, object]:
        return ask(self.admin, command, settings=Settings())

    def held(self) -> int:
        """In-flight jobs + free slots the router keeps for the one job manager."""
        workers = self.ask("ROUTER_SHOW_WORKERS")["connected_workers"]
        assert isinstance(workers, dict) and len(workers) == 1, workers
        (worker,) = workers.values()
        return int(worker["inflight"]) + int(worker["available_slots"])

    def status(self) -> tuple[int, int]:
        """(processed, waiting) jobs of the default queue."""
        status = self.ask("STATUS")
        processed = status["processed_messages_by_queue"]
        waiting = status["waiting_messages_by_queue"]
        assert isinstance(processed, dict) and isinstance(waiting, dict)
        return int(processed.get("default", 0)), int(waiting.get("default", 0))


@pytest.fixture
def stack() -> Iterator[Stack]:
    router = Proc(
        python_module("router", "--frontend", ANY, "--backend", ANY, "--admin", ANY, "--no-journal")
    )
    procs = [router]
    client: Client | None = None
    try:
        ready = router.wait_output(r"router ready: frontend=(\S+) backend=(\S+) admin=(\S+)")
        frontend, backend, admin = ready.groups()
        jobmanager = Proc(
            python_module(
                "jobmanager",
                "--broker",
                backend,
                "--concurrency",
                str(CONCURRENCY),
                "--prefetch",
                str(CAP),
                "--prefetch-budget",
                "0.05",
                "--job-module",
                SAMPLE,
            )
        )
        procs.append(jobmanager)
        jobmanager.wait_output(r"jobmanager connected", timeout=60)
        client = Client(frontend)
        yield Stack(admin, client)
    finally:
        if client is not None:
            client.channel.close()
        for proc in reversed(procs):
            proc.stop()


def run_watching(stack: Stack, jobs: int, callable_name: str, *args: object) -> tuple[int, bool]:
    """Send ``jobs`` jobs and watch the router until they are processed.

    Returns the most the router held for the job manager meanwhile, and
    whether jobs were seen waiting at the router.
    """
    start, _ = stack.status()
    for _ in range(jobs):
        stack.send(callable_name, *args)
    most, waited = 0, False

    def finished() -> bool:
        nonlocal most, waited
        most = max(most, stack.held())
        processed, waiting = stack.status()
        waited = waited or waiting > 0
        return processed >= start + jobs

    wait_for(finished, 120, f"{jobs} {callable_name} jobs processed", poll=0.005)
    return most, waited


def test_slow_jobs_wait_at_the_router_and_no_op_jobs_are_prefetched(stack: Stack) -> None:
    # Slow jobs from the start: the job manager never asks for more than it can run.
    most, waited = run_watching(stack, 6, "slow", 0.3)
    assert most <= CONCURRENCY, json.dumps(stack.ask("ROUTER_SHOW_WORKERS"))
    assert waited  # the jobs it could not run yet stayed with the router
    # No-op jobs: it takes up to the cap beyond its processes.
    most, _ = run_watching(stack, 300, "noop")
    assert most > CONCURRENCY
    wait_for(lambda: stack.held() == CONCURRENCY + CAP, 30, "the whole prefetch held")
    # Slow again: it runs what it had taken, takes back the slots it no longer
    # wants (UNREADY), and the rest waits at the router.
    _, waited = run_watching(stack, 16, "slow", 0.3)
    assert waited
    wait_for(lambda: stack.held() == CONCURRENCY, 30, "one slot per process again")
