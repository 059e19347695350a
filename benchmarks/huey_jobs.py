"""Huey's side of the latency benchmark: the same ``stamp`` job, on Redis.

The Redis port comes from ``EMQ_BENCH_REDIS_PORT`` (the benchmark starts a
Redis of its own). ``notify_result`` lets ``Result.get(blocking=True)`` wait on
Redis instead of polling, Huey's fastest way to wait for a result.
"""

from __future__ import annotations

import os
import time

from huey import RedisHuey

huey = RedisHuey(
    "emq-bench",
    port=int(os.environ.get("EMQ_BENCH_REDIS_PORT", "6379")),
    notify_result=True,
)


@huey.task()
def stamp() -> int:
    """The monotonic clock (ns) when the task started."""
    return time.monotonic_ns()


@huey.task()
def noop() -> None:
    """Do nothing."""
