"""Jobs of the rate-limit end-to-end tests (imported by the job managers with --job-module)."""

from __future__ import annotations

import os
import time

from django_eventmq.client.jobs import job


def _note(path: str, n: int) -> None:
    # One write on an O_APPEND descriptor: lines from concurrent workers never interleave.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{time.time()!r} {n}\n".encode())
    finally:
        os.close(fd)


@job(guarantee=True, rate_limit="10/s")
def limited(path: str, n: int) -> None:
    """At most 10 started a second, whichever job manager runs it."""
    _note(path, n)


@job(guarantee=True, queue="email")
def email(path: str, n: int) -> None:
    """Of the queue the router limits (RATE_LIMITS email=10/s in the tests)."""
    _note(path, n)


@job(guarantee=True, queue="other")
def other(path: str, n: int) -> None:
    """Of a queue without a limit."""
    _note(path, n)
