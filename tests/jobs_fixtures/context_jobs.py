"""Jobs that report their own context (``current_job()``): test_context_e2e.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django_eventmq import current_job
from django_eventmq.client.jobs import job
from django_eventmq.errors import Retry

MODULE = __name__


def seen() -> dict[str, Any] | None:
    """What ``current_job()`` says here, as JSON-able fields (None outside a job)."""
    context = current_job()
    if context is None:
        return None
    return {
        "msgid": context.msgid,
        "name": context.name,
        "queue": context.queue,
        "attempt": context.attempt,
        "retries_left": context.retries_left,
        "retry_count": context.headers.retry_count,
        "timeout": context.headers.timeout,
        "args": list(context.args),
    }


@job(reply_requested=True, timeout=60)
def plain(n: int) -> dict[str, Any] | None:
    return seen()


@job(reply_requested=True)
def counting(n: int) -> Iterator[int]:
    """A generator job: its context at its first step and at its end."""
    first = seen()
    yield 1
    return {"first": first, "last": seen()}  # type: ignore[return-value]


@job(reply_requested=True)
async def napping(seconds: float) -> dict[str, Any] | None:
    """An async job: its context after an await."""
    await asyncio.sleep(seconds)
    return seen()


@job(reply_requested=True, retry_count=2)
def flaky(notes: str) -> dict[str, Any] | None:
    """Fails (asking for a quick retry) until its last attempt; notes each attempt."""
    here = seen()
    with Path(notes).open("a") as fh:
        fh.write(json.dumps(here) + "\n")
    assert here is not None
    if here["retries_left"] > 0:
        raise Retry(in_=0.1)
    return here
