"""The job the throughput benchmark runs: it does nothing, so only the machinery is measured."""

from __future__ import annotations

import time
from typing import Any

from django_eventmq.client.jobs import job


@job
def noop(*args: Any, **kwargs: Any) -> None:
    """Do nothing."""


def ref_noop(*args: Any, **kwargs: Any) -> None:
    """Do nothing (a plain function for the reference job manager, which imports any path)."""


@job(reply_requested=True)
def stamp() -> int:
    """The monotonic clock (ns) when the job started, for the latency benchmark.

    CLOCK_MONOTONIC is one clock for every process on a Linux machine, so the
    sender can subtract its own reading taken just before ``.delay()``.
    """
    return time.monotonic_ns()
