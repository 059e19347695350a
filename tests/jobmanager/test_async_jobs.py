"""Async jobs (``@job async def``) in a job manager whose worker children are real
processes, driven by the stand-in router: result, one event loop per child, failure,
hard timeout, CANCEL of a running one, progress (PARTIAL), async generators, tasks
left behind. Soft limits of async jobs: ``test_soft_timeout.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from django_eventmq.protocol import Done, Partial, Ready, Reply
from django_eventmq.runtime.settings import Settings
from tests.fake_router import SAMPLE, FakeRouter, body
from tests.jobs_fixtures import limits
from tests.jobs_fixtures.running import payload, running, settings_for
from tests.support import wait_for

LIMITS = limits.MODULE


def settings(router: FakeRouter, **options: Any) -> Settings:
    return settings_for(router, job_modules=(SAMPLE, LIMITS), **options)


def job(name: str, *args: Any) -> str:
    return body(name, *args, path=LIMITS)


def lines(path: Path) -> list[str]:
    return path.read_text().split("\n")[:-1] if path.exists() else []


def done_of(router: FakeRouter, msgid: str, timeout: float = 30) -> Done:
    return router.expect(Done, job_msgid=msgid, timeout=timeout)[1]


def test_async_job_returns_its_value(router: FakeRouter) -> None:
    with running(settings(router)):
        identity, _ = router.handshake(features=True)
        msgid = router.request(identity, job("async_add", 2, 3), reply=True)
        done = done_of(router, msgid)
    assert (done.status, payload(done)) == ("ok", {"value": 5})


def test_async_job_returns_its_value_to_a_reference_router(router: FakeRouter) -> None:
    with running(settings(router, concurrency=1)):
        identity, _ = router.handshake()
        router.wait_count(Ready, 1)
        msgid = router.request(identity, job("async_add", 20, 22), reply=True)
        _, reply = router.expect(Reply, reply_to=msgid, timeout=30)
    assert payload(reply) == {"value": 42}


def test_one_event_loop_per_child_is_reused(router: FakeRouter) -> None:
    with running(settings(router, concurrency=1)):
        identity, _ = router.handshake(features=True)
        first = router.request(identity, job("loop_of_process"), reply=True)
        first_value = payload(done_of(router, first))["value"]
        router.request(identity, body("add", 1, 1), reply=True)  # a plain job in between
        second = router.request(identity, job("loop_of_process"), reply=True)
        second_value = payload(done_of(router, second))["value"]
    assert first_value == second_value  # same pid, same loop


def test_async_job_failure_is_reported_like_any_other(router: FakeRouter) -> None:
    with running(settings(router)):
        identity, _ = router.handshake(features=True)
        msgid = router.request(identity, job("async_fails", "bad"), reply=True)
        done = done_of(router, msgid)
    assert done.status == "failed"
    error = payload(done)["error"]
    assert (error["type"], error["message"]) == ("ValueError", "bad")


@pytest.mark.parametrize("name", ["async_slow", "async_blocks"])  # awaiting; blocking its loop
def test_async_job_past_its_hard_timeout_is_killed(
    router: FakeRouter, tmp_path: Path, name: str
) -> None:
    marker = tmp_path / "marker"
    with running(settings(router, concurrency=1)):
        identity, _ = router.handshake(features=True)
        msgid = router.request(identity, job(name, 60, str(marker)), timeout=1)
        assert done_of(router, msgid).status == "timeout"
        after = router.request(identity, job("async_add", 1, 1), reply=True)
        assert payload(done_of(router, after)) == {"value": 2}  # in the replacement
    assert [line.split()[0] for line in lines(marker)] == ["start"]


def test_cancel_of_a_running_async_job(router: FakeRouter, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    with running(settings(router, concurrency=1)):
        identity, _ = router.handshake(features=True)
        msgid = router.request(identity, job("async_slow", 60, str(marker)), reply=True)
        wait_for(lambda: lines(marker), 30, "the async job started")
        router.cancel(identity, msgid)
        done = done_of(router, msgid)
        assert done.status == "cancelled"
        after = router.request(identity, job("async_add", 2, 2), reply=True)
        assert payload(done_of(router, after)) == {"value": 4}
    assert [line.split()[0] for line in lines(marker)] == ["start"]  # never finished


def _partials(router: FakeRouter, msgid: str) -> list[Any]:
    return [m.value for _, m in router.received if isinstance(m, Partial) and m.job_msgid == msgid]


def test_async_job_reports_progress(router: FakeRouter) -> None:
    with running(settings(router)):
        identity, _ = router.handshake(features=True, heartbeat=False)
        msgid = router.request(identity, job("async_progress", 4, 0.1), reply=True)
        done = done_of(router, msgid)
        router.pump(0.2)
    assert payload(done) == {"value": "finished"}
    values = _partials(router, msgid)
    assert values and values[-1] == {"step": 4, "of": 4}  # the last one is never dropped
    assert all(value in [{"step": n, "of": 4} for n in range(1, 5)] for value in values)


def test_async_generator_job_reports_each_value_and_returns_none(router: FakeRouter) -> None:
    with running(settings(router)):
        identity, _ = router.handshake(features=True, heartbeat=False)
        msgid = router.request(identity, job("async_steps", 3), reply=True)
        done = done_of(router, msgid)
        router.pump(0.2)
    assert payload(done) == {"value": None}
    values = _partials(router, msgid)
    assert values and values[-1] == 2


def test_tasks_an_async_job_leaves_behind_are_cancelled(router: FakeRouter, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    with running(settings(router)):
        identity, _ = router.handshake(features=True)
        msgid = router.request(identity, job("async_leaves_a_task", str(marker)), reply=True)
        assert payload(done_of(router, msgid)) == {"value": "returned"}
    assert [line.rsplit(" ", 1)[0] for line in lines(marker)] == ["background cancelled"]
