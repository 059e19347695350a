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


def test_bundles_stay_within_a_lowered_max_message_bytes(
    tmp_path: Path, eventmq_settings: Any
) -> None:
    """MAX_MESSAGE_BYTES lowered (docs/security.md): each job fits, but 400 jobs of
    3 KB do not fit one frame. The router cuts its bundles at what the job
    manager's FEATURES said it takes, so ZeroMQ never drops the connection (it
    did: jobs were handed out again, deaths counted, and most never ran)."""
    from tests.jobs_fixtures.sample import echo

    jobs = 400
    env = {"EMQ_MAX_MESSAGE_BYTES": "262144", "EMQ_MAX_BODY_BYTES": "65536"}
    with serving(
        RouterStack(tmp_path, "tests.jobs_fixtures.sample", env=env), eventmq_settings
    ) as s:
        for _ in range(jobs):
            echo.delay("x" * 3000)
        wait_for(lambda: s.monitor()["queued"] >= jobs, timeout=30, what=f"{jobs} jobs stored")
        s.start_jobmanager(concurrency=2)  # a backlog: the first turn hands out a lot
        wait_for(lambda: _processed(s) >= jobs, timeout=60, what=f"{jobs} jobs processed")
        monitor = s.monitor()
        assert monitor["in_flight"] == 0 and monitor["queued"] == 0, monitor
        for proc in s.procs:
            assert "dropped" not in proc.output(), proc.output()[-2000:]
