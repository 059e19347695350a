"""Soft time limits in real worker children: SoftTimeLimitExceeded raised inside the job.

The job's ``soft-timeout`` goes to its child with the job (``J<seq>:<seconds>``);
the child arms a SIGALRM timer around the call (:mod:`django_eventmq.jobmanager.invoke`).
An async job sees its task cancelled at the soft limit. The hard ``timeout``
(the lifecycle kills the child) is tested with the job manager in
``test_soft_timeout_manager.py``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from django_eventmq.jobmanager import invoke, pipe
from django_eventmq.jobmanager.lifecycle import Lifecycle
from django_eventmq.jobmanager.managed_job import ManagedJob
from django_eventmq.jobmanager.outcomes import Recorder
from django_eventmq.jobmanager.pool import Child, Pool, Status
from django_eventmq.protocol.status import JobStatus
from django_eventmq.runtime.settings import Settings
from tests.fake_router import SAMPLE, body
from tests.jobs_fixtures import limits
from tests.support import wait_for

LIMITS = limits.MODULE


def lines(path: Path) -> list[str]:
    return path.read_text().split("\n")[:-1] if path.exists() else []


@pytest.fixture
def child() -> Iterator[tuple[Pool, Child]]:
    """One real worker child with the soft-limit fixtures and the sample jobs."""
    pool = Pool(Settings(concurrency=1, job_modules=(SAMPLE, LIMITS)))
    try:
        (one,) = pool.respawn()
        wait_for(lambda: pool.receive(one) == [] and one.status is Status.UP, 20, "child up")
        yield pool, one
    finally:
        pool.close()


Run = Callable[..., tuple[str, Any]]


@pytest.fixture
def run(child: tuple[Pool, Child]) -> Run:
    """Run one job in the child: ``(status, decoded payload)``."""
    pool, one = child
    seqs = iter(range(1, 1000))

    def run_job(name: str, *args: Any, soft: int | None = None, path: str = LIMITS) -> Any:
        seq = next(seqs)
        results: list[tuple[int, str, str]] = []
        pool.send(one, seq, f"m{seq}", body(name, *args, path=path), soft_timeout=soft)

        def done() -> bool:
            results.extend(pool.receive(one))
            return bool(results)

        wait_for(done, 30, f"result of {name}")
        assert results[0][0] == seq
        status, payload = results[0][1], results[0][2]
        return status, json.loads(payload) if payload else None

    return run_job


def test_job_frame_carries_the_soft_timeout() -> None:
    assert pipe.encode_job(7, "[]", 3) == b"J7:3\n[]"
    assert pipe.decode_job_frame(b"J7:3\n[]")[:3] == (b"7", 3, b"[]")
    assert pipe.decode_job_frame(pipe.encode_job(7, "[]"))[:3] == (b"7", None, b"[]")


def test_a_job_catches_the_soft_limit_cleans_up_and_returns(run: Run, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    status, payload = run("cleans_up", 30, str(marker), soft=1)
    assert status == JobStatus.OK
    assert payload == {"value": "cleaned up after: soft time limit of 1s exceeded"}
    steps = [line.split()[0] for line in lines(marker)]
    assert steps == ["start", "cleanup"]


def test_a_job_that_re_raises_fails_with_soft_time_limit_exceeded(run: Run, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    status, payload = run("cleans_up_and_fails", 30, str(marker), soft=1)
    assert status == JobStatus.FAILED
    assert payload["type"] == "SoftTimeLimitExceeded"
    assert payload["path"] == "django_eventmq.errors.SoftTimeLimitExceeded"
    assert payload["message"] == "soft time limit of 1s exceeded"
    assert "time.sleep" in payload["traceback"]  # raised where the job was
    assert [line.split()[0] for line in lines(marker)] == ["cleanup"]


def test_a_job_that_ends_in_time_is_not_interrupted_later(run: Run, tmp_path: Path) -> None:
    """The timer is disarmed when the job ends: the next job (no soft limit) in the
    same child sleeps past where the first one's limit would have fired."""
    assert run("quick", "fast", soft=1) == (JobStatus.OK, {"value": "fast"})
    marker = tmp_path / "marker"
    assert run("cleans_up", 2, str(marker)) == (JobStatus.OK, {"value": "finished"})
    assert [line.split()[0] for line in lines(marker)] == ["start"]


def test_after_a_soft_limit_the_child_goes_on_without_one(run: Run, tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    assert run("cleans_up", 30, str(first), soft=1)[0] == JobStatus.OK
    assert run("cleans_up", 2, str(second)) == (JobStatus.OK, {"value": "finished"})
    pids = {line.split()[1] for line in lines(first) + lines(second)}
    assert len(pids) == 1  # the same child ran both: the limit did not end it


def test_a_chatty_job_is_stopped_and_the_pipe_stays_whole(
    child: tuple[Pool, Child], run: Run, tmp_path: Path
) -> None:
    """A soft limit that falls while a progress report is being written waits for the
    frame to be whole (the job manager reads every frame after it)."""
    marker = tmp_path / "marker"
    assert run("reports_while_limited", 10**12, str(marker), soft=1) == (
        JobStatus.OK,
        {"value": "stopped"},
    )
    _pool, one = child
    assert all(isinstance(value, str) for _, value in one.partials)  # frames decoded
    assert run("add", 2, 3, path=SAMPLE) == (JobStatus.OK, {"value": 5})
    assert one.status is Status.UP


def test_the_main_thread_waiting_on_another_is_interrupted(run: Run) -> None:
    assert run("in_a_thread", 3, soft=1) == (JobStatus.OK, {"value": "main thread interrupted"})


def test_async_job_sees_cancelled_error_and_may_return(run: Run, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    assert run("async_cleans_up", 30, str(marker), soft=1) == (
        JobStatus.OK,
        {"value": "cleaned up"},
    )
    # What the job saw: asyncio.CancelledError, with the limit as its message.
    assert lines(marker)[1].startswith("cancelled: soft time limit of 1s exceeded ")


def test_async_job_ended_by_the_cancellation_fails_with_soft_time_limit_exceeded(
    run: Run, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    status, payload = run("async_cleans_up_and_fails", 30, str(marker), soft=1)
    assert status == JobStatus.FAILED
    assert (payload["type"], payload["message"]) == (
        "SoftTimeLimitExceeded",
        "soft time limit of 1s exceeded",
    )
    assert [line.split()[0] for line in lines(marker)] == ["cleanup"]
    # The loop survives for the next async job.
    assert run("async_add", 1, 2) == (JobStatus.OK, {"value": 3})


def lifecycle_run(job: ManagedJob) -> list[tuple[str, JobStatus, str]]:
    """Run ``job`` through a Lifecycle and one real child (local retries, as with a
    reference router); the outcomes it reports."""
    settings = Settings(concurrency=1, job_modules=(LIMITS,), retry_backoff_base=0.1)
    pool = Pool(settings)
    reported: list[tuple[str, JobStatus, str]] = []
    lifecycle = Lifecycle(
        settings,
        pool,
        Recorder("test"),
        report=lambda job, status, payload: reported.append((job.msgid, status, payload)),
        nack=lambda job, reason: None,
        router_retries=lambda: False,
    )
    try:
        (one,) = pool.respawn()
        wait_for(lambda: pool.receive(one) == [] and one.status is Status.UP, 20, "child up")
        lifecycle.accept(job)

        def reported_yet() -> bool:
            now = time.monotonic()
            lifecycle.due_retries(now)
            lifecycle.dispatch(now)
            lifecycle.receive(one, now)
            return bool(reported)

        wait_for(reported_yet, 30, "the job's outcome")
    finally:
        pool.close()
    return reported


def test_lifecycle_hands_the_soft_timeout_to_the_child(tmp_path: Path) -> None:
    """ManagedJob.soft_timeout reaches the child through Lifecycle.dispatch."""
    marker = tmp_path / "marker"
    job = ManagedJob("soft-1", "default", body("cleans_up", 30, str(marker), path=LIMITS), True)
    job.timeout, job.soft_timeout = 20, 1
    ((msgid, status, payload),) = lifecycle_run(job)
    assert (msgid, status) == ("soft-1", JobStatus.OK)
    assert json.loads(payload)["value"].startswith("cleaned up after: soft time limit")


def test_a_retried_job_gets_its_soft_timeout_again(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    job_body = body("cleans_up_and_fails", 30, str(marker), path=LIMITS)
    job = ManagedJob("soft-2", "default", job_body, True, retry_count=1)
    job.soft_timeout = 1
    ((msgid, status, payload),) = lifecycle_run(job)
    assert (msgid, status) == ("soft-2", JobStatus.FAILED)
    assert "SoftTimeLimitExceeded" in payload
    assert [line.split()[0] for line in lines(marker)] == ["cleanup", "cleanup"]  # both runs


def test_soft_limit_outside_the_main_thread_is_not_set_and_says_so(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(invoke, "_warned_thread", False)
    got: list[Any] = []
    with caplog.at_level(logging.WARNING, "django_eventmq.worker"):
        thread = threading.Thread(
            target=lambda: got.append(invoke.call(limits.quick.func, ("x",), {}, 1))
        )
        thread.start()
        thread.join(10)
    assert got == ["x"]
    assert "soft time limits need the main thread" in caplog.text
