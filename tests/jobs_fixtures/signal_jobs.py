"""Jobs and signal receivers for tests/django/test_signals_e2e.py.

Imported by the worker children (``--job-module``), which connects the receivers
there: each signal a worker sends is one JSON line in ``$SIGNALS_NOTES``.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from django.dispatch import receiver

from django_eventmq import JobContext, signals
from django_eventmq.client.jobs import Job, job
from django_eventmq.errors import Retry

MODULE = __name__


@job(reply_requested=True)
def doubles(n: int) -> int:
    return n * 2


@job(reply_requested=True)
def breaks(n: int) -> int:
    raise ValueError(f"broke on {n}")


@job(reply_requested=True, retry_count=1)
def second_time_lucky(n: int) -> int:
    """Asks for a quick retry on its first run, succeeds on the second."""
    context = signals_context()
    if context.attempt == 1:
        raise Retry(in_=0.1)
    return n


@job(reply_requested=True, retry_count=1)
async def async_doubles(n: int) -> int:
    """An async job (they run at once on the worker's loop): asks for a quick retry
    on its first run when ``n`` is 0."""
    await asyncio.sleep(0.2)  # beside the others
    if n == 0 and signals_context().attempt == 1:
        raise Retry(in_=0.1)
    return n * 2


@job(reply_requested=True)
async def async_breaks(n: int) -> int:
    await asyncio.sleep(0.2)
    raise ValueError(f"broke on {n}")


def signals_context() -> JobContext:
    from django_eventmq import current_job

    context = current_job()
    assert context is not None
    return context


def _note(signal: str, sender: Any, context: JobContext, **extra: Any) -> None:
    path = os.environ.get("SIGNALS_NOTES")
    if not path:
        return
    line = {
        "signal": signal,
        "pid": os.getpid(),
        "sender_is_job": isinstance(sender, Job) and sender.name == context.name,
        "msgid": context.msgid,
        "name": context.name,
        "attempt": context.attempt,
        "retries_left": context.retries_left,
        **extra,
    }
    with Path(path).open("a") as fh:
        fh.write(json.dumps(line) + "\n")


@receiver(signals.job_started)
def started(sender: Any, context: JobContext, **kwargs: Any) -> None:
    _note("started", sender, context)


@receiver(signals.job_succeeded)
def succeeded(sender: Any, context: JobContext, result: Any, **kwargs: Any) -> None:
    _note("succeeded", sender, context, result=result)


@receiver(signals.job_failed)
def failed(sender: Any, context: JobContext, exception: BaseException, **kwargs: Any) -> None:
    _note("failed", sender, context, exception=type(exception).__name__, message=str(exception))


@receiver(signals.job_retrying)
def retrying(sender: Any, context: JobContext, exception: BaseException, **kwargs: Any) -> None:
    _note("retrying", sender, context, exception=type(exception).__name__)


@receiver(signals.job_started)
def raises(sender: Any, context: JobContext, **kwargs: Any) -> None:
    """A receiver that raises: logged, and the job runs as if it did not."""
    raise RuntimeError("a receiver's own bug")
