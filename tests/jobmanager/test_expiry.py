"""A job manager does not start a job whose ``expires`` time passed while it waited
(prefetched, or held for a local retry): it reports it expired and records it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from django_eventmq.jobmanager.lifecycle import Lifecycle
from django_eventmq.jobmanager.managed_job import ManagedJob
from django_eventmq.jobmanager.outcomes import Recorder
from django_eventmq.jobmanager.pool import Pool
from django_eventmq.protocol.headers import Headers
from django_eventmq.protocol.status import JobStatus, expired_reply
from django_eventmq.runtime.settings import Settings
from tests.fake_router import SAMPLE, body

Reported = list[tuple[str, JobStatus, str]]


@pytest.fixture
def lifecycle() -> Iterator[tuple[Lifecycle, Recorder, Reported]]:
    """A lifecycle on a pool with no child started: nothing can run."""
    pool = Pool(Settings(concurrency=1, job_modules=(SAMPLE,)))
    recorder = Recorder("jm-test")
    reported: Reported = []
    life = Lifecycle(
        Settings(concurrency=1),
        pool,
        recorder,
        report=lambda job, status, payload: reported.append((job.msgid, status, payload)),
        nack=lambda job, reason: None,
        router_retries=lambda: True,
    )
    try:
        yield life, recorder, reported
    finally:
        pool.close()


def test_an_expired_job_is_reported_expired_and_recorded_not_started(
    lifecycle: tuple[Lifecycle, Recorder, Reported],
) -> None:
    life, recorder, reported = lifecycle
    old = ManagedJob("old", "q", body("add", 1, 2), True, record=True)
    old.headers = Headers(expires=time.time() - 1)
    fresh = ManagedJob("fresh", "q", body("add", 1, 2), True, record=True)
    fresh.headers = Headers(expires=time.time() + 600)
    life.accept(old)  # the expiry stage acts on both: their headers say when they expire
    life.accept(fresh)
    life.dispatch(time.monotonic())
    ((msgid, status, payload),) = reported
    # The DONE words are fixed: ``cancelled``, with an ``Expired`` error.
    assert (msgid, status) == ("old", JobStatus.CANCELLED)
    assert json.loads(payload)["error"]["type"] == "Expired" and expired_reply(payload)
    assert [(r["msgid"], r["status"]) for r in recorder.records] == [("old", "expired")]
    assert recorder.records[0]["error"]["type"] == "Expired"
    assert life.stats.finished["q"] == {JobStatus.CANCELLED: 1}  # the DONE words
    # The other still waits for a child (none runs here), unstarted.
    assert [job.msgid for job in life.jobs.values()] == ["fresh"]
    assert fresh.child is None
