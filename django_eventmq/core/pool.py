"""A small, explicit supervisor of worker child processes.

One :class:`Child` record per process (pid, status, jobs run, jobs in
flight). The job manager drives it in separate steps: :meth:`Pool.reap`
collects children that exited, :meth:`Pool.check` retires children that ran
``MAX_JOBS_PER_CHILD`` jobs, :meth:`Pool.respawn` starts replacements. Children
are started with the ``spawn`` method so they inherit no ZeroMQ context and no
database connection, and live long, so the start-up cost (~0.1 s) is paid
rarely.

Each child has one pipe. The job manager polls the pipe's file descriptor
next to its socket, so a result is read the moment it is written.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import math
import multiprocessing
import select
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnContext
from multiprocessing.process import BaseProcess

from . import worker
from .settings import Settings

logger = logging.getLogger("django_eventmq.pool")

#: Bytes of job bodies queued in one child's pipe beyond the job it runs.
#: Below the kernel's pipe buffer (64 KiB on Linux), so writing a queued job
#: never blocks the job manager's loop.
PIPE_BUDGET = 32 * 1024

#: Longest wait before restarting children that keep failing to start.
MAX_START_DELAY = 10.0


class Status(enum.Enum):
    """Life of a child: STARTING -> UP -> (RETIRING) -> DEAD."""

    STARTING = "starting"  # spawned; importing hooks and job modules
    UP = "up"  # takes jobs
    RETIRING = "retiring"  # ran its share of jobs; finishes what it holds, then exits
    DEAD = "dead"  # exited (or its pipe closed); waiting to be reaped


@dataclass(eq=False)
class Child:
    """What the pool knows about one worker process."""

    process: BaseProcess
    conn: Connection
    started: float
    status: Status = Status.STARTING
    #: Jobs finished, and jobs handed over (finished + in flight).
    jobs_run: int = 0
    assigned: int = 0
    #: seq -> (msgid, body size) of jobs written to the pipe, in order.
    inflight: dict[int, tuple[str, int]] = field(default_factory=dict)
    queued_bytes: int = 0
    #: Why start-up failed, as the child reported it.
    failure: str = ""
    #: It reached UP once; it was told to exit after its share of jobs.
    was_up: bool = False
    retired: bool = False

    def __post_init__(self) -> None:
        # Connection.poll() builds a selector per call; this is ~20x cheaper.
        self.readable = select.poll()
        self.readable.register(self.conn.fileno(), select.POLLIN)
        self._pid: int = self.process.pid or 0
        self._exitcode: int | None = None

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def exitcode(self) -> int | None:
        """Exit code once reaped (``-N`` for signal N), else None."""
        return self._exitcode

    @property
    def fd(self) -> int:
        return self.conn.fileno()

    @property
    def msgids(self) -> list[str]:
        return [msgid for msgid, _ in self.inflight.values()]


@dataclass(frozen=True, slots=True)
class Lost:
    """A job that was in a child when it died."""

    seq: int
    msgid: str
    pid: int
    exitcode: int | None


class Pool:
    """Worker children of one job manager."""

    def __init__(
        self,
        settings: Settings,
        *,
        hooks: str | None = None,
        watch: Callable[[int], None] | None = None,
        unwatch: Callable[[int], None] | None = None,
        start_method: str = "spawn",
    ) -> None:
        self.settings = settings
        self.hooks = hooks
        self.size = settings.concurrency
        self.max_jobs = settings.max_jobs_per_child
        # Queue depth per child: prefetch is spread over the children, so a
        # child has its next job at hand when it finishes one.
        self.depth = 1 + math.ceil(settings.prefetch / settings.concurrency)
        self._watch = watch or (lambda fd: None)
        self._unwatch = unwatch or (lambda fd: None)
        self._ctx: SpawnContext = multiprocessing.get_context(start_method)  # type: ignore[assignment]
        self.children: dict[int, Child] = {}  # by pipe fd
        self._start_failures = 0
        self._next_start = 0.0
        self._failure_logged = False

    # -- starting ----------------------------------------------------------
    def spawn(self, now: float | None = None) -> Child:
        """Start one child."""
        parent_end, child_end = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(
            target=worker.child_main,
            args=(child_end, self.settings, self.hooks, logging.getLogger().getEffectiveLevel()),
            name="emq-worker",
            daemon=True,
        )
        process.start()
        child_end.close()  # so the child's exit shows as EOF on our end
        child = Child(process=process, conn=parent_end, started=_now(now))
        self.children[child.fd] = child
        self._watch(child.fd)
        logger.debug("started worker child pid=%d", child.pid)
        return child

    def active(self) -> list[Child]:
        """Children that are or will be taking jobs."""
        return [c for c in self.children.values() if c.status in (Status.STARTING, Status.UP)]

    def respawn(self, now: float | None = None) -> list[Child]:
        """Start children until ``concurrency`` are active (unless start-up keeps failing)."""
        now = _now(now)
        started = []
        while len(self.active()) < self.size and now >= self._next_start:
            started.append(self.spawn(now))
        return started

    # -- talking to children -----------------------------------------------
    def pick(self, size: int) -> Child | None:
        """The least busy child that can take a job of ``size`` bytes now, if any."""
        best: Child | None = None
        for child in self.children.values():
            if child.status is not Status.UP:
                continue
            n = len(child.inflight)
            if n == 0:
                return child
            fits = n < self.depth and child.queued_bytes + size <= PIPE_BUDGET
            if fits and (best is None or n < len(best.inflight)):
                best = child
        return best

    def send(self, child: Child, seq: int, msgid: str, body_text: str) -> None:
        """Hand one job to ``child``."""
        data = worker.encode_job(seq, body_text)
        if child.inflight:
            child.queued_bytes += len(data)
        child.inflight[seq] = (msgid, len(data) if child.inflight else 0)
        child.assigned += 1
        child.conn.send_bytes(data)
        if self.max_jobs and child.assigned >= self.max_jobs:
            child.status = Status.RETIRING

    def receive(self, child: Child) -> list[tuple[int, str, str]]:
        """Results waiting in ``child``'s pipe: ``[(seq, status, payload), ...]``.

        Marks the child DEAD when its pipe has closed, and UP when it says so.
        """
        results = []
        conn, more = child.conn, child.readable.poll
        while True:
            try:
                if not more(0):
                    break
                data = conn.recv_bytes()
            except (EOFError, OSError):
                self._mark_dead(child)
                break
            if data == worker.UP:
                if child.status is Status.STARTING:
                    child.status = Status.UP
                child.was_up = True
                self._start_failures = 0
                self._failure_logged = False
                continue
            if data.startswith(worker.FAIL):
                child.failure = data[len(worker.FAIL) + 1 :].decode(errors="replace")
                continue
            seq, status, payload = worker.decode_result(data)
            entry = child.inflight.pop(seq, None)
            if entry is not None:
                child.queued_bytes -= entry[1]
                if child.inflight:
                    # The next job is now running, no longer queued in the pipe.
                    first = next(iter(child.inflight))
                    msgid, size = child.inflight[first]
                    child.queued_bytes -= size
                    child.inflight[first] = (msgid, 0)
            child.jobs_run += 1
            results.append((seq, status, payload))
        return results

    def _mark_dead(self, child: Child) -> None:
        if child.status is not Status.DEAD:
            child.status = Status.DEAD
            self._unwatch(child.fd)

    # -- supervising ---------------------------------------------------------
    def check(self) -> None:
        """Tell retiring children that are done to exit; notice deaths the pipe missed."""
        for child in list(self.children.values()):
            if child.status is Status.RETIRING and not child.inflight:
                with contextlib.suppress(OSError):
                    child.conn.send_bytes(worker.EXIT)
                child.retired = True
                self._mark_dead(child)
            elif child.status is not Status.DEAD and child.process.exitcode is not None:
                self._mark_dead(child)

    def reap(self, now: float | None = None) -> list[Lost]:
        """Collect children that exited; returns the jobs they still held."""
        lost: list[Lost] = []
        for fd, child in list(self.children.items()):
            if child.status is not Status.DEAD:
                continue
            # Its pipe closed, so it is exiting: wait briefly, or reap it next pass.
            child.process.join(timeout=0.5)
            if child.process.exitcode is None:
                continue
            del self.children[fd]
            child.conn.close()
            code = child._exitcode = child.process.exitcode
            if not child.was_up:
                self._start_failed(child, _now(now))
            elif child.retired and not child.inflight:
                logger.debug("worker child pid=%d retired after %d jobs", child.pid, child.jobs_run)
            else:
                logger.warning(
                    "worker child pid=%d exited with code %s; replacing it", child.pid, code
                )
            lost.extend(
                Lost(seq=seq, msgid=msgid, pid=child.pid, exitcode=code)
                for seq, (msgid, _size) in child.inflight.items()
            )
            child.process.close()
        return lost

    def _start_failed(self, child: Child, now: float) -> None:
        self._start_failures += 1
        delay = min(0.5 * 2 ** (self._start_failures - 1), MAX_START_DELAY)
        self._next_start = now + delay
        why = child.failure or f"exit code {child.process.exitcode}"
        if not self._failure_logged:
            logger.error("worker child pid=%d failed to start: %s", child.pid, why)
            self._failure_logged = True
        else:
            logger.debug("worker child pid=%d failed to start again: %s", child.pid, why)

    # -- stopping ------------------------------------------------------------
    def busy(self) -> list[Child]:
        return [c for c in self.children.values() if c.inflight]

    def close(self, timeout: float = 2.0) -> None:
        """Stop every child: ask politely, then terminate, then kill."""
        children = list(self.children.values())
        for child in children:
            if child.status is not Status.DEAD:
                with contextlib.suppress(OSError):
                    child.conn.send_bytes(worker.EXIT)
        deadline = time.monotonic() + timeout
        for child in children:
            if not child.inflight:
                child.process.join(max(0.0, deadline - time.monotonic()))
        for child in children:
            if child.process.exitcode is None:
                child.process.terminate()
        for child in children:
            child.process.join(1.0)
            if child.process.exitcode is None:
                child.process.kill()
                child.process.join(1.0)
            self._mark_dead(child)
            child.conn.close()
        self.children.clear()


def _now(now: float | None) -> float:
    return time.monotonic() if now is None else now
