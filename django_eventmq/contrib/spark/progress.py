"""Progress of an enqueue, shown on the driver while the executors send.

Each Spark task pushes its running counts (at most once a second) to a PULL
socket the driver binds on ``spark.driver.host``, which executors can reach
as they reach the driver anyway. Pushes never block and may be dropped:
they are for the progress line only. The result the caller gets comes from
the statistics rows of the successful task attempts (:mod:`.driver`).

A thread on the driver reads the pushes and Spark's status tracker (tasks
done of all tasks in our job group) and prints a line every few seconds, or
redraws a bar when stderr is a terminal.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from django_eventmq.cli.progressbar import bar, redraw
from django_eventmq.contrib.spark.sender import QueueCounts
from django_eventmq.runtime import transport

if TYPE_CHECKING:
    from pyspark import SparkContext

log = logging.getLogger("django_eventmq.spark")

#: Seconds between two pushes of one task.
PUSH_EVERY = 1.0


@dataclass(frozen=True)
class Progress:
    """A snapshot: tasks done of all tasks, and per queue ``[sent, acked, rejected]``."""

    tasks_done: int
    tasks_total: int
    queues: dict[str, list[int]]
    seconds: float
    finished: bool = False

    @property
    def acked(self) -> int:
        return sum(counts[1] for counts in self.queues.values())

    def line(self) -> str:
        per_queue = ", ".join(
            f"{q} {s:,} sent/{a:,} acked/{r:,} rejected"
            for q, (s, a, r) in sorted(self.queues.items())
        )
        rate = self.acked / self.seconds if self.seconds > 0 else 0.0
        state = "done" if self.finished else f"partitions {self.tasks_done}/{self.tasks_total}"
        return f"{state}; {per_queue or 'nothing acknowledged yet'}; {rate:,.0f} jobs/s"


class ProgressPush:
    """Executor side: pushes a task's counts to the driver, at most every ``every`` seconds."""

    def __init__(self, addr: str, partition: int, attempt: int, every: float = PUSH_EVERY) -> None:
        self.partition = partition
        self.attempt = attempt
        self.every = every
        self._next = 0.0
        self.channel = transport.Channel(transport.PUSH, connect=addr, hwm=10)

    def push(self, counts: Mapping[str, QueueCounts], *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now < self._next:
            return
        self._next = now + self.every
        text = json.dumps(
            {
                "partition": self.partition,
                "attempt": self.attempt,
                "queues": {q: [c.sent, c.acked, c.rejected] for q, c in counts.items()},
            }
        )
        # Driver slow or unreachable: this is progress only, drop it.
        with contextlib.suppress(transport.Again):
            self.channel.send_frames([text.encode()], flags=transport.NOBLOCK)

    def close(self) -> None:
        self.channel.close()


class ProgressReporter:
    """Driver side: collects pushes, reads the status tracker, shows :class:`Progress`.

    Call :meth:`start` (binds, starts the thread, returns the address for
    the executors), then :meth:`stop`.
    """

    def __init__(
        self,
        context: SparkContext,
        group: str,
        progress: bool | Callable[[Progress], object],
        interval: float,
        stream: TextIO | None = None,
    ) -> None:
        self.context = context
        self.group = group
        self.callback = progress if callable(progress) else None
        self.interval = interval
        self.stream = stream or sys.stderr
        self.tty = self.callback is None and self.stream.isatty()
        self.started = time.monotonic()
        #: partition -> (attempt, {queue: [sent, acked, rejected]}), latest attempt only.
        self._latest: dict[int, tuple[int, dict[str, list[int]]]] = {}
        self._stop = threading.Event()
        self._bound = threading.Event()
        self._address: str | None = None
        self._thread = threading.Thread(target=self._run, name="emq-spark-progress", daemon=True)

    def start(self) -> str | None:
        """Start the thread; returns the address executors push to (None if it could not bind)."""
        self._thread.start()
        self._bound.wait(10)
        return self._address

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def snapshot(self) -> Progress:
        done, total = self._tasks()
        queues: dict[str, list[int]] = {}
        for _attempt, counts in list(self._latest.values()):
            for queue, numbers in counts.items():
                mine = queues.setdefault(queue, [0, 0, 0])
                for i, n in enumerate(numbers[:3]):
                    mine[i] += n
        return Progress(done, total, queues, time.monotonic() - self.started)

    def finished(self, queues: Mapping[str, QueueCounts], seconds: float) -> None:
        """Show the final counts (those of the successful attempts)."""
        done = {q: [c.sent, c.acked, c.rejected] for q, c in queues.items()}
        self._show(Progress(0, 0, done, seconds, finished=True))
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

    # -- the thread -------------------------------------------------------------
    def _run(self) -> None:
        channel = self._bind()
        self._bound.set()
        try:
            next_show = time.monotonic() + self.interval
            while not self._stop.is_set():
                wait = max(0.0, min(next_show - time.monotonic(), 0.2))
                if channel is not None and channel.poll(int(wait * 1000)):
                    self._take(channel)
                elif channel is None:
                    self._stop.wait(wait)
                if time.monotonic() >= next_show:
                    next_show += self.interval
                    self._report()
        except transport.ContextTerminated:
            pass
        finally:
            if channel is not None:
                channel.close()

    def _report(self) -> None:
        try:
            self._show(self.snapshot())
        except Exception:
            # Progress must never break the enqueue (the status tracker is
            # gone while Spark stops, a callback raised, ...).
            log.debug("progress report failed", exc_info=True)

    def _bind(self) -> transport.Channel | None:
        host = self.context.getConf().get("spark.driver.host") or "127.0.0.1"
        try:
            channel = transport.Channel(
                transport.PULL, bind=f"tcp://{socket.gethostbyname(host)}:*", hwm=10_000
            )
        except (OSError, transport.ZMQError) as exc:
            log.info("no live progress from the executors (cannot bind on %s: %s)", host, exc)
            return None
        self._address = channel.address
        return channel

    def _take(self, channel: transport.Channel) -> None:
        while True:
            try:
                frames = channel.recv_frames(flags=transport.NOBLOCK)
            except transport.Again:
                return
            try:
                (message,) = frames  # one JSON frame; anything else is not ours
                data = json.loads(message)
                partition, attempt = int(data["partition"]), int(data["attempt"])
                queues = {str(q): [int(n) for n in c] for q, c in data["queues"].items()}
            except (ValueError, KeyError, TypeError, AttributeError):
                continue  # not ours; progress only
            known = self._latest.get(partition)
            if known is None or attempt >= known[0]:
                self._latest[partition] = (attempt, queues)

    def _tasks(self) -> tuple[int, int]:
        tracker = self.context.statusTracker()
        done = total = 0
        for job_id in tracker.getJobIdsForGroup(self.group):
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job else ():
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    done += stage.numCompletedTasks
                    total += stage.numTasks
        return done, total

    def _show(self, progress: Progress) -> None:
        if self.callback is not None:
            self.callback(progress)
            return
        if self.tty:
            done, total = progress.tasks_done, progress.tasks_total
            if not total and progress.finished:
                done = total = 1  # the final counts: a full bar
            redraw(self.stream, f"{bar(done, total)} {progress.line()}")
        else:
            self.stream.write(f"django-eventmq spark: {progress.line()}\n")
            self.stream.flush()
