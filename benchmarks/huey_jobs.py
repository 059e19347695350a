"""Huey's side of the latency and throughput benchmarks: the same jobs, on Redis.

The Redis port comes from ``EMQ_BENCH_REDIS_PORT`` (the benchmark starts a
Redis of its own; :func:`connect` points this process at a new one when a
benchmark starts several in turn). ``notify_result`` lets
``Result.get(blocking=True)`` wait on Redis instead of polling, Huey's fastest
way to wait for a result.
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

#: The Redis key :func:`counted` increments: how the throughput benchmark sees
#: that Huey has run all N jobs (one INCR per job, counted against Huey).
DONE_KEY = "emq-bench:done"


def connect(port: int) -> None:
    """Point this process's ``huey`` at the Redis on ``port``."""
    huey.storage_kwargs["port"] = port
    huey.storage = huey.create_storage()


def done() -> int:
    """How many :func:`counted` jobs have run since the key was last deleted."""
    return int(huey.storage.conn.get(DONE_KEY) or 0)


@huey.task()
def stamp() -> int:
    """The monotonic clock (ns) when the task started."""
    return time.monotonic_ns()


@huey.task()
def noop() -> None:
    """Do nothing."""


@huey.task()
def counted(i: int) -> None:
    """Do nothing but count itself done (``INCR`` of :data:`DONE_KEY`)."""
    huey.storage.conn.incr(DONE_KEY)
