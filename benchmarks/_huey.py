"""Huey + Redis as a peer in the benchmarks: a Redis of its own and a Huey consumer.

Redis runs on a free port with persistence off (``--save ''``), as a cache
would, or, ``durable``, with ``appendonly yes`` and ``appendfsync always``
(each write fsynced before Redis answers it) in a temporary directory of
its own: never the machine's Redis. The consumer runs ``benchmarks.huey_jobs``
with process workers, the same number as our job manager's.
:func:`huey_missing` says why Huey cannot run here (no redis-server, huey or
redis not installed), for a skip line.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from benchmarks._peers import BIN, Proc, wait_until
from benchmarks._ports import free_port


def huey_missing() -> str | None:
    """Why the Huey peer cannot run here, or None when it can."""
    if shutil.which("redis-server") is None:
        return "redis-server is not on PATH"
    for module in ("huey", "redis"):
        if importlib.util.find_spec(module) is None:
            return f"the {module!r} package is not installed (pip install -e '.[bench]')"
    if not (BIN / "huey_consumer").exists():
        return f"huey_consumer is not in {BIN}"
    return None


class HueyStack:
    """A Redis server and a Huey consumer, stopped together."""

    def __init__(self, workers: int = 2, *, durable: bool = False) -> None:
        self.port = free_port()
        self.dir = tempfile.TemporaryDirectory(prefix="emq-bench-redis-")
        persistence = ("--appendonly", "yes", "--appendfsync", "always") if durable else ()
        persistence = persistence or ("--appendonly", "no")
        self.redis = Proc(
            [
                "redis-server",
                *("--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir.name),
                *("--save", "", *persistence),
            ]
        )
        self.consumer: Proc | None = None
        try:
            self.redis.wait_output("Ready to accept connections", 30)
            # The client in this process reads the port when benchmarks.huey_jobs is imported.
            os.environ["EMQ_BENCH_REDIS_PORT"] = str(self.port)
            self.consumer = Proc(
                [
                    str(BIN / "huey_consumer"),
                    "benchmarks.huey_jobs.huey",
                    *("--workers", str(workers), "--worker-type", "process"),
                ],
                env={"EMQ_BENCH_REDIS_PORT": str(self.port)},
            )
            self.consumer.wait_output("consumer initialized|Huey consumer started", 30)
            self._warm_up()
        except BaseException:
            self.stop()
            raise

    def _warm_up(self) -> None:
        from benchmarks import huey_jobs

        # A second stack in this process has another port than the one read at import.
        huey_jobs.connect(self.port)
        result = huey_jobs.stamp()
        wait_until(lambda: result.get(blocking=True, timeout=30) is not None, 31, "Huey warm-up")

    def stop(self) -> None:
        if self.consumer is not None:
            self.consumer.stop()
        self.redis.stop()
        Path(f"dump-{self.port}.rdb").unlink(missing_ok=True)
        self.dir.cleanup()
