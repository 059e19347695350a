"""Jobs of the rate-limit end-to-end tests (imported by the job managers with --job-module)."""

from __future__ import annotations

import time

from django_eventmq.client.jobs import job
from tests.system.e2e.append import append_line


def _note(path: str, n: int) -> None:
    append_line(path, f"{time.time()!r} {n}")


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
