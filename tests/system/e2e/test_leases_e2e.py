"""Leases end to end: a router and job managers as real processes.

A job's lease (its ``timeout`` + ``LEASE_GRACE``, or ``JOB_LEASE``) bounds how
long it may stay handed out unreported. A job prefetched behind a long one
waits in its job manager, not started: the job manager names it to the router
while it waits (``QUEUED``), so its lease does not run out there and it is not
handed out a second time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import wait_for
from tests.system.chaos.support import admin_call
from tests.system.e2e.lease_jobs import long, short
from tests.system.e2e.stack import RouterStack, serving

JOB_MODULE = "tests.system.e2e.lease_jobs"


@pytest.fixture
def stack(tmp_path: Path, eventmq_settings: Any) -> Iterator[RouterStack]:
    """A router whose leases are short (the short job's: 1 s + 0.5 s), job managers of
    one child that prefetch one job each (started by the test)."""
    env = {"EMQ_LEASE_GRACE": "0.5", "EMQ_PREFETCH": "1", "EMQ_PREFETCH_BUDGET": "0"}
    with serving(RouterStack(tmp_path, JOB_MODULE, env=env), eventmq_settings) as s:
        yield s


def _runs(path: Path, what: str) -> int:
    if not path.exists():
        return 0
    return sum(1 for line in path.read_text().splitlines() if line.split()[0] == what)


def _workers(stack: RouterStack) -> int:
    return len(admin_call(stack.admin, "ROUTER_SHOW_WORKERS")["connected_workers"])


def test_a_job_prefetched_behind_a_long_one_runs_once(stack: RouterStack, tmp_path: Path):
    out, gate = tmp_path / "runs", tmp_path / "gate"
    # Job manager A (queues default and "a") takes the long job and, prefetched
    # into its one child's queue behind it, the short one.
    stack.start_jobmanager(concurrency=1, queues="default:10,a:10")
    long.delay(str(out), str(gate), 3.0)
    wait_for(lambda: _runs(out, "long-start"), 60, "the long job to start")
    short.delay(str(out), "short")
    wait_for(lambda: stack.monitor()["in_flight"] == 2, 30, "both jobs handed to A")
    # B, idle, would take the short job at once if its lease ran out in A's queue.
    stack.start_jobmanager(concurrency=1)
    wait_for(lambda: _workers(stack) == 2, 60, "job manager B to connect")
    # The long job goes on 3 s more: twice the short job's lease, and the
    # router looks at leases every 0.75 s.
    gate.touch()
    # Behind the short one in A's child (only A serves "a"): once it ran, so did
    # every copy of the short job.
    short.send((str(out), "last"), queue="a")
    wait_for(lambda: _runs(out, "last"), 60, "the last job to run")
    wait_for(lambda: stack.monitor()["in_flight"] == 0, 30, "the router to see every job done")
    assert _runs(out, "short") == 1, out.read_text()
    assert stack.monitor()["expired"] == 0  # no lease ran out
