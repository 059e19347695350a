"""Jobs that say when they ran, for the tests of async jobs running at once."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from django_eventmq import current_job
from django_eventmq.client.jobs import job

MODULE = __name__


def _note(path: str, text: str) -> None:
    with Path(path).open("a") as fh:
        fh.write(f"{text}\n")


@job(reply_requested=True)
async def nap(seconds: float, marker: str, name: str) -> list[float]:
    """Awaits ``seconds``; ``[start, end, pid]``, and a line per run in ``marker``."""
    _note(marker, name)
    start = time.time()
    await asyncio.sleep(seconds)
    return [start, time.time(), os.getpid()]


@job(reply_requested=True)
def hold(seconds: float, marker: str, name: str) -> list[float]:
    """A plain job that holds its process ``seconds``: ``[start, end, pid]``."""
    _note(marker, name)
    start = time.time()
    time.sleep(seconds)
    return [start, time.time(), os.getpid()]


@job(reply_requested=True)
def double(n: int) -> int:
    return 2 * n


@job(reply_requested=True)
async def blocks(seconds: float, marker: str, name: str) -> str:
    """An async job that blocks its loop (no await): it holds up the jobs beside it."""
    _note(marker, name)
    time.sleep(seconds)
    return "finished"


def _msgid() -> str | None:
    context = current_job()
    return None if context is None else context.msgid


@job(reply_requested=True)
async def whose(marker: str, name: str, together: int) -> dict[str, Any]:
    """``current_job()``'s msgid before and after it awaits until ``together`` of
    these run at once (in ``marker``: a line each), and whether they did."""
    before = _msgid()
    _note(marker, name)
    deadline = time.monotonic() + 60
    met = False
    while not met and time.monotonic() < deadline:
        met = len(Path(marker).read_text().split()) >= together
        await asyncio.sleep(0.01)
    return {"before": before, "after": _msgid(), "together": met, "pid": os.getpid()}
