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

from benchmarks._udp import send_done, send_stamp

huey = RedisHuey(
    "emq-bench",
    port=int(os.environ.get("EMQ_BENCH_REDIS_PORT", "6379")),
    notify_result=True,
)


def connect(port: int) -> None:
    """Point this process's ``huey`` at the Redis on ``port``."""
    huey.storage_kwargs["port"] = port
    huey.storage = huey.create_storage()


def queued() -> int:
    """Jobs waiting in Huey's queue."""
    return int(huey.storage.queue_size())


def workers_idle(workers: int) -> bool:
    """Nothing queued and ``workers`` connections blocked in ``BRPOP`` (a Huey
    worker's wait for the next job, ``blocking=True``): every job sent before
    the call has run. Costs Huey nothing per job: two Redis calls per poll."""
    if queued():
        return False
    clients = huey.storage.conn.client_list()
    blocked = sum(1 for c in clients if c.get("cmd") == "brpop" and "b" in c.get("flags", ""))
    return blocked >= workers


@huey.task()
def stamp() -> int:
    """The monotonic clock (ns) when the task started."""
    return time.monotonic_ns()


@huey.task()
def noop() -> None:
    """Do nothing."""


@huey.task()
def done(port: int) -> None:
    """Do nothing, then say so to the benchmark (``benchmarks._udp``)."""
    send_done(port)


@huey.task()
def udp_stamp(port: int, seq: int) -> None:
    """Send ``seq`` and the start time to the benchmark's probe (``benchmarks._udp``)."""
    send_stamp(port, seq)
