"""Soft time limits through the job manager: a REQUEST's ``soft-timeout`` header reaches
the job (real worker children, the stand-in router), the outcome is reported and
recorded like any other, and the hard ``timeout`` still kills a job that goes on.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from django_eventmq.protocol import Done
from django_eventmq.runtime.settings import Settings
from tests.fake_router import FakeRouter, body
from tests.jobs_fixtures import limits
from tests.jobs_fixtures.record_hooks import read_records
from tests.jobs_fixtures.running import payload, running, settings_for
from tests.support import wait_for

LIMITS = limits.MODULE
HOOKS = "tests.jobs_fixtures.record_hooks"


def settings(router: FakeRouter, **options: Any) -> Settings:
    return settings_for(router, job_modules=(LIMITS,), **options)


def steps(path: Path) -> list[str]:
    return [line.split()[0] for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def records_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "records.jsonl"
    monkeypatch.setenv("EMQ_TEST_RECORDS_FILE", str(path))
    return path


def final_record(path: Path, msgid: str) -> dict[str, Any]:
    def final() -> dict[str, Any] | None:
        found = [r for r in read_records(path) if r["msgid"] == msgid and r["finished"]]
        return found[-1] if found else None

    record: dict[str, Any] = wait_for(final, 20, f"the final record of {msgid}")
    return record


def run_limited(
    router: FakeRouter, name: str, marker: Path, hooks: str | None = None, **headers: Any
) -> Done:
    """Run the fixture job ``name`` (60 s of work) with ``headers``; its DONE."""
    with running(settings(router, concurrency=1), hooks=hooks):
        identity, _ = router.handshake(features=True)
        job_body = body(name, 60, str(marker), path=LIMITS)
        msgid = router.request(identity, job_body, reply=True, **headers)
        return router.expect(Done, job_msgid=msgid, timeout=20)[1]


def test_a_job_past_its_soft_timeout_cleans_up_and_its_result_says_so(
    router: FakeRouter, tmp_path: Path, records_file: Path
) -> None:
    marker = tmp_path / "marker"
    done = run_limited(router, "cleans_up", marker, HOOKS, timeout=10, soft_timeout=1)
    assert done.status == "ok"
    assert payload(done) == {"value": "cleaned up after: soft time limit of 1s exceeded"}
    assert steps(marker) == ["start", "cleanup"]
    assert final_record(records_file, done.job_msgid)["status"] == "succeeded"


def test_a_job_that_re_raises_is_a_failure_recorded_as_soft_time_limit_exceeded(
    router: FakeRouter, tmp_path: Path, records_file: Path
) -> None:
    marker = tmp_path / "marker"
    done = run_limited(router, "cleans_up_and_fails", marker, HOOKS, soft_timeout=1)
    assert done.status == "failed"
    assert payload(done)["error"]["type"] == "SoftTimeLimitExceeded"
    assert steps(marker) == ["cleanup"]
    record = final_record(records_file, done.job_msgid)
    assert (record["status"], record["error"]["type"]) == ("failed", "SoftTimeLimitExceeded")


def test_a_job_that_ignores_its_soft_timeout_is_killed_at_the_hard_one(
    router: FakeRouter, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    marker = tmp_path / "marker"
    with caplog.at_level(logging.WARNING):
        done = run_limited(router, "ignores_soft", marker, timeout=3, soft_timeout=1)
    assert done.status == "timeout"
    assert steps(marker) == ["start", "soft"]  # saw the soft limit, never finished
    timed_out = [r.getMessage() for r in caplog.records if "timed out" in r.getMessage()]
    assert len(timed_out) == 1 and done.job_msgid in timed_out[0]


def test_an_async_job_past_its_soft_timeout_sees_the_cancellation(
    router: FakeRouter, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    done = run_limited(router, "async_cleans_up_and_fails", marker, timeout=10, soft_timeout=1)
    assert done.status == "failed"
    assert payload(done)["error"]["type"] == "SoftTimeLimitExceeded"
    assert steps(marker) == ["cleanup"]
