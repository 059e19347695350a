"""A job the router dropped as expired gets its ``expired`` results row, and STATUS counts
it per queue: a real router, a job sent with ``expires=1`` while no job manager runs, one
started after that (the router drops the job when it would hand it out).

The router has no database: the row is written by the client that read the Expired reply
(``.wait()`` with the Django app installed), before it raises JobExpired.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from django_eventmq.cli import status
from django_eventmq.client import connection
from django_eventmq.errors import JobExpired
from django_eventmq.models.results import JobResult
from django_eventmq.protocol.status import EXPIRED_ERROR, JobStatus
from tests.support import Proc, python_module, tcp_addr, wait_for
from tests.system.chaos.support import admin_call, start_router
from tests.system.e2e.expiry_jobs import note_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def router(tmp_path: Path, eventmq_settings: Any) -> Iterator[tuple[str, str, list[Proc]]]:
    """A router with no job manager yet: (backend, admin, processes to stop)."""
    frontend, backend, admin = tcp_addr(), tcp_addr(), tcp_addr()
    procs = [start_router(frontend, backend, admin, tmp_path / "journal.sqlite3")]
    try:
        eventmq_settings(BROKER_ADDR=frontend)
        yield backend, admin, procs
    finally:
        connection.close_clients()
        for proc in reversed(procs):
            proc.stop()


def test_a_job_the_router_dropped_as_expired_is_recorded_and_counted(
    router: tuple[str, str, list[Proc]], tmp_path: Path
) -> None:
    backend, admin, procs = router
    handle = note_run.send((str(tmp_path / "ran"),), expires=1)
    sent = time.time()
    wait_for(lambda: time.time() >= sent + 1.1, 10, what="the job's expiry to pass")
    procs.append(Proc(python_module("jobmanager", "--broker", backend, "--concurrency", "1")))
    with pytest.raises(JobExpired):
        handle.wait(timeout=60)
    row = JobResult.objects.get(msgid=handle.msgid)
    assert (row.status, row.exc_type, row.jobmanager) == (JobStatus.EXPIRED, EXPIRED_ERROR, "")
    assert "expiry" in row.exc_message and row.finished is not None
    assert not (tmp_path / "ran").exists()
    answer = admin_call(admin, "STATUS")
    assert answer["expired_messages_by_queue"] == {"default": 1}
    summary = status.summarize(status.Snapshot(admin_addr=admin, taken_at=0.0, status=answer))
    assert summary["totals"]["expired"] == 1
    assert status.render(summary).rstrip().endswith("0 poisoned, 1 expired")
