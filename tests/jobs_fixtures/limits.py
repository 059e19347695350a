"""Jobs for the soft time limit and async job tests (registered with ``@job``)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from django_eventmq.client.jobs import job
from django_eventmq.errors import SoftTimeLimitExceeded
from django_eventmq.jobmanager.progress import progress

MODULE = __name__


def note(path: str, text: str) -> None:
    """Append ``text`` and our pid to ``path`` (what a test reads to see the job's steps)."""
    with Path(path).open("a") as fh:
        fh.write(f"{text} {os.getpid()}\n")


# -- plain jobs under a soft limit ------------------------------------------------------------


@job
def cleans_up(seconds: float, marker: str) -> str:
    """Sleeps past its soft limit, cleans up, and returns what it did."""
    note(marker, "start")
    try:
        time.sleep(seconds)
    except SoftTimeLimitExceeded as exc:
        note(marker, "cleanup")
        return f"cleaned up after: {exc}"
    return "finished"


@job
def cleans_up_and_fails(seconds: float, marker: str) -> str:
    """Cleans up, then lets the limit fail the job."""
    try:
        time.sleep(seconds)
    except SoftTimeLimitExceeded:
        note(marker, "cleanup")
        raise
    return "finished"


@job
def ignores_soft(seconds: float, marker: str) -> str:
    """Notes the soft limit and goes on working: only the hard timeout stops it."""
    note(marker, "start")
    try:
        time.sleep(seconds)
    except SoftTimeLimitExceeded:
        note(marker, "soft")
    time.sleep(seconds)
    note(marker, "finished")
    return "finished"


@job
def reports_while_limited(count: int, marker: str) -> str:
    """Reports progress as fast as it can until the soft limit stops it."""
    try:
        for n in range(count):
            progress(n)
    except SoftTimeLimitExceeded:
        note(marker, "cleanup")
        return "stopped"
    return "finished"


@job
def quick(value: Any) -> Any:
    return value


@job
def in_a_thread(seconds: float) -> str:
    """Runs a sleep in another thread: the soft limit is raised in the main thread's wait."""
    worker = threading.Thread(target=time.sleep, args=(seconds,))
    worker.start()
    try:
        worker.join()
    except SoftTimeLimitExceeded:
        return "main thread interrupted"
    return "joined"


# -- async jobs -------------------------------------------------------------------------------


@job
async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@job
async def loop_of_process() -> list[int]:
    """``[pid, id of the running loop]``: the same loop serves every async job of a child."""
    await asyncio.sleep(0)
    return [os.getpid(), id(asyncio.get_running_loop())]


@job
async def async_cleans_up(seconds: float, marker: str) -> str:
    """Awaits past its soft limit, sees the cancellation, cleans up, returns."""
    note(marker, "start")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError as exc:
        note(marker, f"cancelled: {exc}")
        return "cleaned up"
    return "finished"


@job
async def async_cleans_up_and_fails(seconds: float, marker: str) -> str:
    """Cleans up on the cancellation and lets it end the job."""
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        note(marker, "cleanup")
        raise
    return "finished"


@job
async def async_slow(seconds: float, marker: str) -> str:
    note(marker, "start")
    await asyncio.sleep(seconds)
    note(marker, "done")
    return "finished"


@job
async def async_blocks(seconds: float, marker: str) -> str:
    """Blocks its loop (no await): not cancelled; the hard timeout stops it."""
    note(marker, "start")
    time.sleep(seconds)
    note(marker, "done")
    return "finished"


@job
async def async_progress(steps: int, pause: float) -> str:
    for n in range(1, steps + 1):
        progress({"step": n, "of": steps})
        await asyncio.sleep(pause)
    return "finished"


@job
async def async_steps(steps: int) -> AsyncIterator[int]:
    """An async generator job: each value it yields is a partial."""
    for n in range(steps):
        await asyncio.sleep(0)
        yield n


@job
async def async_leaves_a_task(marker: str) -> str:
    """Starts a task and returns without waiting for it: it is cancelled when the job ends."""

    async def background() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            note(marker, "background cancelled")
            raise

    asyncio.get_running_loop().create_task(background())
    await asyncio.sleep(0)
    return "returned"


@job
async def async_fails(message: str) -> None:
    await asyncio.sleep(0)
    raise ValueError(message)


# -- sent with .delay() by a client (a reply is asked for) --------------------------------------


@job(reply_requested=True)
async def async_multiply(a: int, b: int) -> int:
    await asyncio.sleep(0.01)
    return a * b


@job(reply_requested=True)
async def async_counts(steps: int, pause: float) -> str:
    for n in range(1, steps + 1):
        progress(n)
        await asyncio.sleep(pause)
    return "counted"
