"""Rate limits end to end: one router and three job managers as real processes.

Each job writes the time it started; the test reads them back. No window of
one second holds more starts than the limit, every job runs exactly once, a
queue without a limit is not slowed by one that has one, the limit survives
a router restart (it is configuration), and a bad limit stops the router at
start with a message that says how to write one.

The starts are taken in the job managers' worker processes, a few ms after
the router handed the jobs out (the moment it counts): each window checked
is that much shorter (``SLACK``) so the transit's jitter cannot fake a
violation. Without a limit the jobs of a test start within one window.
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from django_eventmq.client import connection
from tests.support import Proc, clean_environ, python_module, tcp_addr, wait_for
from tests.system.chaos.support import admin_call, start_router
from tests.system.e2e.rate_limit_jobs import email, limited, other

JOB_MODULE = "tests.system.e2e.rate_limit_jobs"
LIMIT, PERIOD = 10, 1.0
SLACK = 0.1


class Stack:
    def __init__(self, frontend: str, backend: str, admin: str, journal: Path) -> None:
        self.frontend, self.backend, self.admin, self.journal = frontend, backend, admin, journal
        self.router: Proc | None = None
        self.procs: list[Proc] = []

    def start_router(self) -> None:
        self.router = start_router(
            self.frontend, self.backend, self.admin, self.journal, EMQ_RATE_LIMITS="email=10/s"
        )

    def stop_router(self) -> None:
        assert self.router is not None
        self.router.stop()
        self.router = None

    def start_jobmanagers(self, n: int = 3) -> None:
        for _ in range(n):
            self.procs.append(
                Proc(
                    python_module(
                        "jobmanager", "--broker", self.backend, "--concurrency", "2",
                        "--queues", "default:10,email:10,other:10", "--job-module", JOB_MODULE,
                    )
                )
            )  # fmt: skip


@pytest.fixture
def stack(tmp_path: Path, eventmq_settings: Any) -> Iterator[Stack]:
    s = Stack(tcp_addr(), tcp_addr(), tcp_addr(), tmp_path / "journal.sqlite3")
    s.start_router()
    try:
        eventmq_settings(BROKER_ADDR=s.frontend)
        s.start_jobmanagers()
        warm_up(s, tmp_path / "warm-up")
        yield s
    finally:
        connection.close_clients()
        for proc in reversed(s.procs):
            proc.stop()
        if s.router is not None:
            s.router.stop()


def warm_up(stack: Stack, path: Path) -> None:
    """Until every job manager ran jobs: a worker process's first job waits for it to
    start, which would bunch the first starts together whatever the router did."""

    def connected() -> bool:
        workers = admin_call(stack.admin, "ROUTER_SHOW_WORKERS")["connected_workers"]
        return len([w for w in workers.values() if w["available_slots"]]) == 3

    wait_for(connected, 30, what="three job managers with free slots")
    n = 60
    for i in range(n):
        other.delay(str(path), i)
    wait_all(path, n)

    def all_ran() -> bool:
        processed = admin_call(stack.admin, "STATUS")["processed_messages_by_worker"]
        return len([w for w, count in processed.items() if count]) == 3

    wait_for(all_ran, 30, what="every job manager ran a job")


def starts(path: Path) -> list[tuple[float, int]]:
    if not path.exists():
        return []
    return sorted(
        (float(t), int(n)) for t, n in (line.split() for line in path.read_text().splitlines())
    )


def wait_all(path: Path, n: int, timeout: float = 60.0) -> list[tuple[float, int]]:
    wait_for(lambda: len(starts(path)) >= n, timeout, what=f"{n} jobs started in {path.name}")
    return starts(path)


def busiest_window(times: list[float]) -> int:
    """Most starts in any window of ``PERIOD - SLACK`` seconds."""
    return max(
        sum(1 for t in times[i:] if t < start + PERIOD - SLACK) for i, start in enumerate(times)
    )


def assert_once_each(found: list[tuple[float, int]], n: int) -> None:
    runs = Counter(i for _, i in found)
    assert sorted(runs) == list(range(n)) and set(runs.values()) == {1}, runs


def test_a_jobs_limit_holds_across_job_managers_and_every_job_runs_once(
    stack: Stack, tmp_path: Path
) -> None:
    path = tmp_path / "limited"
    n = 35
    for i in range(n):
        limited.delay(str(path), i)
    found = wait_all(path, n)
    assert_once_each(found, n)
    assert busiest_window([t for t, _ in found]) <= LIMIT
    status = admin_call(stack.admin, "STATUS")
    key = "tests.system.e2e.rate_limit_jobs.limited"
    assert status["rate_limits_by_key"][key]["limit"] == "10/s"


def test_a_queues_limit_leaves_another_queue_unthrottled(stack: Stack, tmp_path: Path) -> None:
    email_path, other_path = tmp_path / "email", tmp_path / "other"
    n = 25
    for i in range(n):
        email.delay(str(email_path), i)
        other.delay(str(other_path), i)
    others = wait_all(other_path, n)
    held = admin_call(stack.admin, "STATUS")["rate_limits_by_queue"]["email"]
    assert held["limit"] == "10/s"
    emails = wait_all(email_path, n)
    assert_once_each(emails, n)
    assert_once_each(others, n)
    assert busiest_window([t for t, _ in emails]) <= LIMIT
    # Every job of the other queue started before the limit let the 21st email out.
    assert others[-1][0] < emails[2 * LIMIT][0]
    assert busiest_window([t for t, _ in others]) > LIMIT


def test_the_limit_holds_after_a_router_restart(stack: Stack, tmp_path: Path) -> None:
    path = tmp_path / "limited"
    n = 30
    for i in range(n):
        limited.delay(str(path), i)
    wait_for(lambda: len(starts(path)) >= 12, 30, what="some jobs started")
    stack.stop_router()  # SIGTERM: the jobs it holds stay in its journal (parked ones too)
    stopped = time.time()
    assert len(starts(path)) < n
    stack.start_router()
    restarted = time.time()
    wait_for(lambda: {i for _, i in starts(path)} == set(range(n)), 60, what="every job ran")
    found = starts(path)
    # A job running while the router stopped may run again (at-least-once, as for any
    # job); no other job does.
    runs = Counter(i for _, i in found)
    first = {i: min(t for t, j in found if j == i) for i in runs}
    again = [i for i, count in runs.items() if count > 1]
    assert all(first[i] < stopped for i in again) and len(again) <= 6, (again, runs)
    # Counts start afresh after a restart: the windows on each side are checked.
    assert busiest_window([t for t, _ in found if t < stopped]) <= LIMIT
    assert busiest_window([t for t, _ in found if t >= restarted]) <= LIMIT
    assert len([t for t, _ in found if t >= restarted]) > LIMIT


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["--rate-limit", "email=10/x"], {}),
        ([], {"EMQ_RATE_LIMITS": "email=ten"}),
    ],
)
def test_a_bad_limit_stops_the_router_at_start_saying_how_to_write_one(
    tmp_path: Path, args: list[str], env: dict[str, str]
) -> None:
    done = subprocess.run(
        python_module("router", "--frontend", tcp_addr(), "--journal", str(tmp_path / "j"), *args),
        env={**clean_environ(), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "use 'N/unit'" in done.stderr and "e.g. '100/m'" in done.stderr, done.stderr
    assert not (tmp_path / "j").exists()
