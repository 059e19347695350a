"""Expiry end to end: a router and a job manager as real processes.

A job sent with ``expires=1`` while no job manager runs is never run once one
starts after its expiry: its ``.wait()`` raises :class:`JobExpired`, the router
deleted it from its journal and counts it in MONITOR ``jobs_expired``; a job
with a generous expiry (the decorator's 600 s) sent at the same time runs.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from django_eventmq.errors import JobExpired
from django_eventmq.protocol import parse_headers
from django_eventmq.protocol.status import JobStatus
from tests.support import wait_for
from tests.system.chaos.support import admin_call
from tests.system.e2e.expiry_jobs import note_run
from tests.system.e2e.stack import RouterStack, serving

JOB_MODULE = "tests.system.e2e.expiry_jobs"


class Stack(RouterStack):
    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp, JOB_MODULE)

    def stored(self, msgid: str) -> float | None:
        """The ``expires`` of ``msgid``'s journal row (None: no such row)."""
        db = sqlite3.connect(f"file:{self.journal}?mode=ro", uri=True, timeout=10)
        try:
            row = db.execute("SELECT headers FROM jobs WHERE msgid = ?", (msgid,)).fetchone()
        finally:
            db.close()
        if row is None:
            return None
        raw = row[0]
        return parse_headers(raw.decode() if isinstance(raw, bytes) else raw).expires


@pytest.fixture
def stack(tmp_path: Path, eventmq_settings: Any) -> Iterator[Stack]:
    """A router with no job manager yet (the test starts one)."""
    with serving(Stack(tmp_path), eventmq_settings) as s:
        yield s


def _runs(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_job_expired_before_any_job_manager_started_never_runs(
    stack: Stack, tmp_path: Path
) -> None:
    late, fine = tmp_path / "late", tmp_path / "fine"
    expiring = note_run.send((str(late),), expires=1)
    generous = note_run.send((str(fine),))
    # guarantee: each send returned once the router stored it.
    expires = stack.stored(expiring)
    assert expires is not None and stack.stored(generous) is not None
    wait_for(lambda: time.time() >= expires, 10, what="the first job's expiry to pass")
    stack.start_jobmanager()
    assert generous.wait(timeout=60) == "ran"
    with pytest.raises(JobExpired, match="expiry"):
        expiring.wait(timeout=60)
    assert expiring.status == JobStatus.EXPIRED
    assert (_runs(late), _runs(fine)) == (0, 1)
    assert stack.stored(expiring) is None  # finished: deleted from the journal
    monitor = admin_call(stack.admin, "MONITOR")
    assert monitor["jobs_expired"] == 1
    assert monitor["per_queue"]["default"]["jobs_expired"] == 1
