"""Jobs of the retry-policy tests (imported by the job manager with --job-module).

Each notes every run in the file it is given (``run <attempt> <unix time>``), so
a test counts the attempts and sees when each started.
"""

from __future__ import annotations

import time
from pathlib import Path

from django_eventmq.client.jobs import job
from django_eventmq.errors import Retry

MODULE = __name__


def _run(path: str) -> int:
    """Note this run; returns which run it is (from 1)."""
    file = Path(path)
    runs = len(file.read_text().splitlines()) + 1 if file.exists() else 1
    with file.open("a") as fh:
        fh.write(f"run {runs} {time.time()!r}\n")
    return runs


def runs(path: Path) -> list[float]:
    """When each run noted in ``path`` started (unix times, in order)."""
    if not path.exists():
        return []
    return [float(line.split()[2]) for line in path.read_text().splitlines()]


@job(
    retry_count=5,
    retry_on=(ConnectionError, TimeoutError),
    retry_backoff=0.1,
    retry_max_delay=0.2,
    reply_requested=True,
)
def flaky(path: str, failures: int) -> str:
    """Fail with ConnectionError ``failures`` times, then succeed."""
    if _run(path) <= failures:
        raise ConnectionError("the service is not answering")
    return "done"


@job(retry_count=5, retry_on=ConnectionError, retry_backoff=0.1, reply_requested=True)
def wrong_kind(path: str) -> str:
    """Fails with an exception its retry_on does not list: never retried."""
    _run(path)
    raise ValueError("bad input, retrying will not help")


@job(retry_count=3, reply_requested=True)
def asks_again(path: str, times: int, seconds: float) -> str:
    """``raise Retry(in_=seconds)`` on its first ``times`` runs."""
    if _run(path) <= times:
        raise Retry(in_=seconds, reason="not ready yet")
    return "ready"


@job(retry_count=3, reply_requested=True)
async def async_asks_again(path: str, times: int, seconds: float) -> str:
    """The async form of :func:`asks_again`."""
    if _run(path) <= times:
        raise Retry(in_=seconds)
    return "ready"


@job(retry_count=3, retry_on=ConnectionError, retry_backoff=0.1, reply_requested=True)
async def async_flaky(path: str, failures: int) -> str:
    """An async job failing with ConnectionError ``failures`` times, then succeeding."""
    if _run(path) <= failures:
        raise ConnectionError("down")
    return "done"


@job(retry_count=2, reply_requested=True)
def always_asks(path: str) -> str:
    """Asks for a retry every time: stops after retry_count + 1 runs."""
    _run(path)
    raise Retry(in_=0.1)


@job(retry_count=4, retry_backoff=50, retry_max_delay=0.3, reply_requested=True)
def capped(path: str, failures: int) -> str:
    """A 50 s back-off capped at 0.3 s: its retries come quickly."""
    if _run(path) <= failures:
        raise RuntimeError("boom")
    return "done"
