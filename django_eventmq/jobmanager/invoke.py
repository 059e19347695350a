"""Calling a job's code in a worker child: soft time limits and async jobs.

**Soft time limit of a plain job** (``soft-timeout:N`` header): a one-shot
``SIGALRM`` timer (``signal.setitimer(ITIMER_REAL, N)``) is armed around the
call; its handler raises :class:`~django_eventmq.errors.SoftTimeLimitExceeded`
in the child's main thread, wherever the job's Python code is (a
``time.sleep`` or a socket wait is interrupted too), once. Limits: C code that
does not return to the interpreter (a long C extension call, a blocking call
that retries on EINTR inside C) sees it only when it returns; job code that
uses ``SIGALRM`` itself is overridden while the timer is armed; the timer
only works in the main thread (children run jobs there; elsewhere no soft
limit is set and a warning is logged). A timer that was already set (not in a
worker child) is set again afterwards with the time it had left. The hard
``timeout`` still stops the process whatever the job does.

While the child writes a frame to its pipe for the job (a progress report),
the limit is held back (:func:`shield`) and raised right after, so a frame is
never cut in half.

**Async jobs** (``@job async def``): the coroutine runs as a task on the
child's event loop, made the first time and reused for every async job of
the process (:func:`event_loop`). The soft limit is ``loop.call_later(N,
task.cancel)``: the job sees :class:`asyncio.CancelledError` at the
``await`` it was in (as with :func:`asyncio.timeout`); if the cancellation
ends the task the job fails with ``SoftTimeLimitExceeded``, if the job
catches it and returns, that value is its result. A job that blocks the loop
(no ``await``) is not cancelled until it awaits; the hard timeout still
applies. Tasks a job started and left running are cancelled when it ends.
An ``async def`` generator reports each value it yields as progress; its
result is None.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from types import AsyncGeneratorType, CoroutineType, FrameType, GeneratorType
from typing import Any

from django_eventmq.errors import SoftTimeLimitExceeded
from django_eventmq.jobmanager import progress

logger = logging.getLogger("django_eventmq.worker")


class _Alarm:
    """The state the SIGALRM handler reads (main thread only)."""

    armed = False
    #: The limit fired while shielded: raise when the shield is left.
    pending = False
    shielded = 0
    seconds = 0.0


_alarm = _Alarm()
_warned_thread = False


def _message(seconds: float) -> str:
    return f"soft time limit of {seconds:g}s exceeded"


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    if not _alarm.armed:
        return  # disarmed between the timer firing and this handler running
    if _alarm.shielded:
        _alarm.pending = True
        return
    _alarm.armed = False  # once: the job's clean-up is not interrupted again
    raise SoftTimeLimitExceeded(_message(_alarm.seconds))


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def soft_limit(seconds: float | None) -> Iterator[None]:
    """Raise :class:`SoftTimeLimitExceeded` in the body after ``seconds`` (None: no limit)."""
    global _warned_thread
    if not seconds:
        yield
        return
    if not _in_main_thread():
        if not _warned_thread:
            _warned_thread = True
            logger.warning("soft time limits need the main thread; jobs here run without one")
        yield
        return
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    _alarm.seconds, _alarm.pending, _alarm.armed = seconds, False, True
    began = time.monotonic()
    earlier = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        _alarm.armed = False  # first: a signal from here on does nothing
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if earlier[0]:  # someone else's timer (not in a worker child): give it back
            left = max(0.001, earlier[0] - (time.monotonic() - began))
            signal.setitimer(signal.ITIMER_REAL, left, earlier[1])


@contextlib.contextmanager
def shield() -> Iterator[None]:
    """Hold a soft limit back while the body runs (a pipe write); raise it after."""
    if not _in_main_thread():
        yield  # the handler runs in the main thread: another thread's write is safe
        return
    _alarm.shielded += 1
    try:
        yield
    finally:
        _alarm.shielded -= 1
        if not _alarm.shielded and _alarm.pending and _alarm.armed:
            _alarm.pending = _alarm.armed = False
            raise SoftTimeLimitExceeded(_message(_alarm.seconds))


def call(func: Callable[..., Any], args: Any, kwargs: Any, soft: float | None = None) -> Any:
    """Run a job's callable to its result under the soft limit ``soft`` (seconds).

    A generator's values are reported as progress (its ``return`` value is the
    result); a coroutine or async generator (what an ``async def`` job returns
    when called) runs on :func:`event_loop`. Decided on what the call returned,
    so a plain job pays one ``type()`` check (the hot path of tiny jobs).
    """
    if not soft:
        value = func(*args, **kwargs)
        kind = type(value)
        if kind is GeneratorType:
            return _run_generator(value)
        if kind is CoroutineType or kind is AsyncGeneratorType:
            return run_async(value)
        return value
    deadline = time.monotonic() + soft
    with soft_limit(soft):
        value = func(*args, **kwargs)
        if type(value) is GeneratorType:
            value = _run_generator(value)
    if type(value) is CoroutineType or type(value) is AsyncGeneratorType:
        # The SIGALRM timer stops here; the rest of the time is the loop's (task.cancel).
        value = run_async(value, max(0.001, deadline - time.monotonic()), soft)
    return value


async def call_async(
    func: Callable[..., Any], args: Any, kwargs: Any, soft: float | None = None
) -> Any:
    """:func:`call` for an async job on the running loop, beside others (no SIGALRM:
    the soft limit cancels this task only, as :func:`run_async` does).

    A job the job manager flagged async that turns out plain (a changed module)
    just runs, blocking the loop while it does.
    """
    value = func(*args, **kwargs)
    kind = type(value)
    if kind is GeneratorType:
        return _run_generator(value)
    if kind is AsyncGeneratorType:
        value = _drain(value)
    elif kind is not CoroutineType:
        return value
    if not soft:
        return await value
    message = _message(soft)
    task = asyncio.current_task()
    assert task is not None  # called in its own task (.tasks)
    fired = False

    def expire() -> None:
        nonlocal fired
        fired = True
        task.cancel(message)  # the job sees why, as with run_async

    timer = asyncio.get_running_loop().call_later(soft, expire)
    try:
        return await value
    except asyncio.CancelledError:
        if fired:
            raise SoftTimeLimitExceeded(message) from None
        raise
    finally:
        timer.cancel()


def _run_generator(gen: GeneratorType[Any, None, Any]) -> Any:
    """Report each value a generator job yields; its ``return`` value is the result."""
    while True:
        try:
            part = next(gen)
        except StopIteration as stop:
            return stop.value
        progress.progress(part)


async def _drain(agen: AsyncIterator[Any]) -> None:
    """Report each value an async generator job yields."""
    async for part in agen:
        progress.progress(part)


_loops = threading.local()


def event_loop() -> asyncio.AbstractEventLoop:
    """This thread's event loop for async jobs: made once, reused by every later job."""
    loop: asyncio.AbstractEventLoop | None = getattr(_loops, "loop", None)
    if loop is None or loop.is_closed():
        loop = _loops.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
    return loop


def close_loop() -> None:
    """Close this thread's event loop (the child is exiting)."""
    loop: asyncio.AbstractEventLoop | None = getattr(_loops, "loop", None)
    if loop is not None and not loop.is_closed():
        with contextlib.suppress(Exception):
            loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    _loops.loop = None


def run_async(work: Any, soft: float | None = None, limit: float | None = None) -> Any:
    """Run a coroutine (or drain an async generator) on :func:`event_loop` to its result.

    ``soft``: seconds until its task is cancelled; ``limit``: the job's whole soft
    limit, for the message (``soft`` when not given).
    """
    message = _message(limit or soft or 0)
    loop = event_loop()
    coro: Coroutine[Any, Any, Any] = _drain(work) if inspect.isasyncgen(work) else work
    task = loop.create_task(coro)
    fired = False

    def expire() -> None:
        nonlocal fired
        fired = True
        task.cancel(message)

    timer = loop.call_later(soft, expire) if soft else None
    try:
        return loop.run_until_complete(task)
    except asyncio.CancelledError:
        if fired:
            raise SoftTimeLimitExceeded(message) from None
        raise
    finally:
        if timer is not None:
            timer.cancel()
        _cancel_leftovers(loop)


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks a job started and did not wait for, and let them finish."""
    left = [task for task in asyncio.all_tasks(loop) if not task.done()]
    if not left:
        return
    for task in left:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
