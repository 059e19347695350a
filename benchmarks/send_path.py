"""What the client's send path costs in Python, without a socket.

    .venv/bin/python benchmarks/send_path.py [--jobs 20000] [--rounds 5]

Times, per job (µs, best of the rounds), ``.delay()`` and ``.send()`` from the
body's encoding to the hand-over to the client, with a client that takes the
frames and does nothing: only the work of building the job (body, headers,
the features a job uses) is measured, not ZeroMQ. The cases: a plain
``.delay()`` (no feature), ``.delay()`` of an expiring job, of a unique job,
``.send(countdown=)``, and ``.send(headers=)``. Compare two trees (A/B) by
running it in each.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ADDR = "tcp://127.0.0.1:1"


class _NullClient:
    """Takes a job's frames and drops them (no socket)."""

    closed = False

    def send_request_frames(self, msgid: bytes, queue: bytes, headers: bytes, body: bytes) -> None:
        pass

    def send_request_guaranteed(self, *args: Any, **kwargs: Any) -> None:
        pass


def _install_null_client() -> None:
    """This thread's client for ADDR is a :class:`_NullClient`."""
    try:
        from django_eventmq.client import pool
    except ImportError:  # a tree before client/pool.py (an A/B against it)
        from django_eventmq.client import connection as pool  # type: ignore[no-redef]

    clients = pool._ThreadClients(pool._pid)
    clients[ADDR] = _NullClient()  # type: ignore[assignment]
    pool._local.clients = clients


def _per_job(send: Callable[[int], object], count: int) -> float:
    start = time.perf_counter()
    for i in range(count):
        send(i)
    return (time.perf_counter() - start) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    os.environ["EMQ_BROKER_ADDR"] = ADDR
    from django_eventmq.client.jobs import job
    from django_eventmq.runtime import config

    config.reset()
    _install_null_client()

    def plain(n: int) -> None: ...

    def expiring(n: int) -> None: ...

    def unique(n: int) -> None: ...

    for f in (plain, expiring, unique):
        f.__module__ = "benchmarks.send_path_jobs"
        f.__qualname__ = f.__name__
    plain_job = job(plain)
    expiring_job = job(expires=60)(expiring)
    unique_job = job(unique_for=60)(unique)
    cases: dict[str, Callable[[int], object]] = {
        "delay(), no feature": plain_job.delay,
        "delay(), expiring job": expiring_job.delay,
        "delay(), unique job": unique_job.delay,
        "send(countdown=5)": lambda i: plain_job.send((i,), countdown=5),
        "send(headers={priority: 3})": lambda i: plain_job.send((i,), headers={"priority": 3}),
    }
    best = dict.fromkeys(cases, float("inf"))
    for send in cases.values():
        _per_job(send, 2_000)  # warm up
    for _ in range(args.rounds):
        for name, send in cases.items():
            best[name] = min(best[name], _per_job(send, args.jobs))
    for name, value in best.items():
        print(f"{name:32s} {value:7.3f} µs/job")


if __name__ == "__main__":
    main()
