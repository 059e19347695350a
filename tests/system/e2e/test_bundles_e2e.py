"""Bundles end to end: our router and our job manager as real processes.

At full load the router hands the job manager several jobs per turn and the job
manager reports several per turn: both go as bundles (protocol/bundle.py). Every
job sent runs once and is reported, nothing is left in flight, and neither side
drops a malformed bundle or message.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.jobs_fixtures.sample import noop
from tests.support import wait_for
from tests.system.chaos.support import admin_call
from tests.system.e2e.stack import RouterStack, serving

JOBS = 3000


@pytest.fixture
def stack(tmp_path: Path, eventmq_settings: Any) -> Iterator[RouterStack]:
    with serving(RouterStack(tmp_path, "tests.jobs_fixtures.sample"), eventmq_settings) as s:
        yield s


def _processed(stack: RouterStack) -> int:
    status = admin_call(stack.admin, "STATUS")
    return sum(status["processed_messages_by_queue"].values())


def test_every_job_runs_and_is_reported_with_bundles_both_ways(stack: RouterStack) -> None:
    stack.start_jobmanager(concurrency=2)
    for _ in range(JOBS):
        noop.delay()
    wait_for(lambda: _processed(stack) >= JOBS, timeout=60, what=f"{JOBS} jobs processed")
    monitor = stack.monitor()
    assert monitor["in_flight"] == 0 and monitor["queued"] == 0, monitor
    assert _processed(stack) == JOBS
    for proc in stack.procs:
        assert "malformed" not in proc.output(), proc.output()[-2000:]
