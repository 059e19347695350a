"""The job call under a soft limit, in this process's main thread (as in a worker child):
raised once, held back while a frame is written, the timer disarmed and an earlier
timer given back; coroutines, async generators and generator jobs."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from django_eventmq.errors import EventMQError, SoftTimeLimitExceeded
from django_eventmq.jobmanager import invoke, progress
from tests.support import wait_for


@pytest.fixture
def reports() -> Iterator[list[str]]:
    """Progress reports of the job run in the test (as a child's gate would get them)."""
    got: list[str] = []
    progress.set_reporter(got.append)
    try:
        yield got
    finally:
        progress.set_reporter(None)


def sleeper(seconds: float) -> str:
    time.sleep(seconds)
    return "slept"


def test_the_limit_is_raised_inside_the_job() -> None:
    with pytest.raises(SoftTimeLimitExceeded, match="soft time limit of 1s exceeded"):
        invoke.call(sleeper, (30,), {}, 1)
    assert issubclass(SoftTimeLimitExceeded, EventMQError)


def test_the_limit_is_raised_once() -> None:
    seen: list[str] = []

    def keeps_going() -> str:
        try:
            time.sleep(30)
        except SoftTimeLimitExceeded:
            seen.append("soft")
        time.sleep(1.5)  # past where a repeating timer would fire again
        return "done"

    assert invoke.call(keeps_going, (), {}, 1) == "done"
    assert seen == ["soft"]


def test_no_limit_and_a_job_in_time_leave_the_timer_as_it_was() -> None:
    """(pytest-timeout may have its own timer running: it is kept, not stopped.)"""
    handler, (before, _) = signal.getsignal(signal.SIGALRM), signal.getitimer(signal.ITIMER_REAL)
    assert invoke.call(sleeper, (0,), {}, None) == "slept"
    assert invoke.call(sleeper, (0,), {}, 5) == "slept"
    after, _ = signal.getitimer(signal.ITIMER_REAL)
    assert (after == 0) == (before == 0) and after <= before
    assert signal.getsignal(signal.SIGALRM) is handler


def test_an_earlier_timer_is_given_back() -> None:
    fired: list[int] = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    try:
        signal.setitimer(signal.ITIMER_REAL, 30)
        assert invoke.call(sleeper, (0,), {}, 5) == "slept"
        left = signal.getitimer(signal.ITIMER_REAL)[0]
        assert 0 < left <= 30
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert fired == []


def test_a_limit_during_a_shielded_write_is_raised_after_it() -> None:
    steps: list[str] = []

    def writes() -> None:
        with invoke.shield():
            wait_for(lambda: invoke._alarm.pending, 10, "the limit to fall while shielded")
            steps.append("frame whole")
        steps.append("not reached")

    with pytest.raises(SoftTimeLimitExceeded):
        invoke.call(writes, (), {}, 1)
    assert steps == ["frame whole"]


def test_a_generator_job_reports_until_the_limit(reports: list[str]) -> None:
    def rows() -> Iterator[int]:
        n = 0
        while True:
            yield n
            n += 1
            time.sleep(0.01)

    with pytest.raises(SoftTimeLimitExceeded):
        invoke.call(rows, (), {}, 1)
    assert reports and reports[0] == '{"value":0}'


async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


def returns_a_coroutine(a: int) -> Any:
    return async_add(a, a)


async def async_rows(n: int) -> AsyncIterator[int]:
    for i in range(n):
        await asyncio.sleep(0)
        yield i


async def awaits(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "awaited"


def test_coroutines_run_on_one_loop(reports: list[str]) -> None:
    assert invoke.call(async_add, (1, 2), {}, None) == 3
    loop = invoke.event_loop()
    assert invoke.call(returns_a_coroutine, (4,), {}, 5) == 8
    assert invoke.call(async_rows, (3,), {}, None) is None
    assert reports == ['{"value":0}', '{"value":1}', '{"value":2}']
    assert invoke.event_loop() is loop and not loop.is_running()


def test_an_async_job_past_its_limit_fails_with_soft_time_limit_exceeded() -> None:
    with pytest.raises(SoftTimeLimitExceeded, match="soft time limit of 1s exceeded"):
        invoke.call(awaits, (30,), {}, 1)
    assert invoke.call(awaits, (0,), {}, 1) == "awaited"  # the loop still serves


def test_close_loop_makes_a_new_one_next_time() -> None:
    loop = invoke.event_loop()
    invoke.close_loop()
    assert loop.is_closed()
    assert invoke.event_loop() is not loop
