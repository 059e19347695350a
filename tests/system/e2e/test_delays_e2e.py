"""Delays and kept options end to end: a router and a job manager as real processes.

A job sent with ``countdown=2`` starts no earlier than the ``delay-until``
its REQUEST carried (read back from the router's journal, where the
guaranteed job is stored before ``send`` returns) and does run; a job sent
with ``.send(headers=...)`` keeps the decorator's ``timeout`` and is killed
at it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from django_eventmq.errors import JobError
from django_eventmq.protocol import Headers, parse_headers
from django_eventmq.protocol.status import JobStatus
from tests.support import wait_for
from tests.system.e2e.delay_jobs import note_start, stall
from tests.system.e2e.stack import RouterStack, serving

JOB_MODULE = "tests.system.e2e.delay_jobs"


@pytest.fixture
def stack(tmp_path: Path, eventmq_settings: Any) -> Iterator[Path]:
    """A router and a job manager (2 workers); yields the router's journal file."""
    with serving(RouterStack(tmp_path, JOB_MODULE), eventmq_settings) as s:
        s.start_jobmanager()
        yield s.journal


def _stored_headers(journal: Path, msgid: str) -> Headers:
    """The header frame the router stored for ``msgid`` (as the client sent it)."""
    db = sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=10)
    try:
        row = db.execute("SELECT headers FROM jobs WHERE msgid = ?", (msgid,)).fetchone()
    finally:
        db.close()
    assert row is not None, f"job {msgid} is not in the journal"
    raw = row[0]
    return parse_headers(raw.decode() if isinstance(raw, bytes) else raw)


def _noted(path: Path, what: str) -> list[float]:
    if not path.exists():
        return []
    return [
        float(line.split()[1]) for line in path.read_text().splitlines() if line.split()[0] == what
    ]


def test_countdown_job_starts_no_earlier_than_its_due_time_and_runs(stack, tmp_path):
    out = tmp_path / "started"
    handle = note_start.send((str(out),), countdown=2)
    # guarantee: send returned after the router stored it, so the row is there
    # (two seconds before it is due).
    due = _stored_headers(stack, handle).delay_until
    assert due is not None
    assert handle.wait(timeout=60) == "ran"
    [started] = wait_for(lambda: _noted(out, "start"), 10, what="the job's start")
    assert started >= due


def test_send_with_headers_keeps_the_decorators_timeout(stack, tmp_path):
    out = tmp_path / "stall"
    handle = stall.send((str(out), 120), headers=Headers(priority=3))
    with pytest.raises(JobError) as raised:
        handle.wait(timeout=60)
    assert raised.value.exc_type == "TimeoutError"
    assert handle.status == JobStatus.TIMED_OUT
    assert len(_noted(out, "start")) == 1
    assert _noted(out, "done") == []
