"""The job the throughput benchmark runs: it does nothing, so only the machinery is measured."""

from __future__ import annotations

import time
from typing import Any

from benchmarks._udp import send_done, send_stamp
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


@job(guarantee=True)
def done_guaranteed(port: int) -> None:
    """Do nothing, then say so to the benchmark (``benchmarks._udp``); each
    ``.delay()`` returns once the router has stored the job."""
    send_done(port)


@job
def done(port: int) -> None:
    """:func:`done_guaranteed` with a plain ``.delay()``."""
    send_done(port)


@job
def udp_stamp(port: int, seq: int) -> None:
    """Send ``seq`` and the start time to the benchmark's probe (``benchmarks._udp``)."""
    send_stamp(port, seq)


@job(guarantee=True)
def udp_stamp_guaranteed(port: int, seq: int) -> None:
    """:func:`udp_stamp`, each ``.delay()`` returning once the job is stored."""
    send_stamp(port, seq)
