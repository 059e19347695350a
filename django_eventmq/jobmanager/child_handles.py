"""One worker process as the pool sees it: its record and what it hands back.

:class:`Child` is the pool's record of one process (its pipes, status, jobs in
flight, records not yet acknowledged); :class:`Lost` is a job a dead child
held, :class:`Taken` what a stopped child held. :mod:`.pool` drives them.
"""

from __future__ import annotations

import enum
import os
import select
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from django_eventmq.jobmanager.pipe import FrameReader


class Status(enum.Enum):
    """Life of a child: STARTING -> UP -> (RETIRING | KILLING) -> DEAD."""

    STARTING = "starting"  # spawned; importing hooks and job modules
    UP = "up"  # takes jobs
    RETIRING = "retiring"  # ran its share of jobs; finishes what it holds, then exits
    KILLING = "killing"  # stopped mid-job (timeout, cancel); its jobs were taken back
    DEAD = "dead"  # exited (or its pipe closed); waiting to be reaped


@dataclass(eq=False)
class Child:
    """What the pool knows about one worker process."""

    process: BaseProcess
    #: Our end of what the child says (results...): read, polled; the pool's key.
    conn: Connection
    started: float
    status: Status = Status.STARTING
    #: Jobs finished, and jobs handed over (finished + in flight).
    jobs_run: int = 0
    assigned: int = 0
    #: seq -> (msgid, bytes queued in the pipe) of jobs handed over, in order;
    #: the first one is running (its bytes count 0).
    inflight: dict[int, tuple[str, int]] = field(default_factory=dict)
    queued_bytes: int = 0
    #: monotonic time the running (first) job started.
    head_since: float = 0.0
    #: Async jobs among ``inflight`` (flagged ``J*``: they run beside each other).
    concurrent: set[int] = field(default_factory=set)
    #: seq -> monotonic start of the async jobs it runs now, as far as we know: the
    #: first of ``inflight``, in order, up to ASYNC_CONCURRENCY, up to a plain job
    #: (the child's rule, :mod:`.tasks`).
    tasks: dict[int, float] = field(default_factory=dict)
    #: Frames queued by assign(), written by flush().
    outgoing: list[bytes] = field(default_factory=list)
    #: Our end of the child's records pipe.
    records_conn: Connection | None = None
    #: Our end of the child's job pipe (written); None: ``conn`` both ways.
    jobs_conn: Connection | None = None
    #: Records batches written and not yet acknowledged, oldest first.
    records: list[bytes] = field(default_factory=list)
    records_bytes: int = 0
    #: The hooks module has record_results (said in the child's UP frame).
    can_record: bool = False
    #: Partials read from the pipe and not yet taken: ``(seq, payload)``, in order.
    partials: list[tuple[int, str]] = field(default_factory=list)
    #: Why start-up failed, as the child reported it.
    failure: str = ""
    #: It reached UP once; it was told to exit after its share of jobs.
    was_up: bool = False
    retired: bool = False
    #: Replaced by a warm restart (SIGHUP): finishes its jobs beside its successor.
    renewed: bool = False
    #: monotonic time it last had no job (it is idle while ``inflight`` is empty).
    idle_since: float = 0.0
    kill_at: float = 0.0  # when SIGKILL is sent again if it has not exited
    #: DEAD and not exited yet: when it is sent SIGKILL (again); 0.0 until reaping first saw it.
    exit_by: float = 0.0
    #: It was SIGKILLed for not exiting once DEAD (its warning is logged then).
    forced: bool = False
    #: It said it is done (its last frame): it is only exiting now; ``lingering``
    #: names the non-daemon threads a job left running then, which hold it.
    said_bye: bool = False
    lingering: str = ""

    def __post_init__(self) -> None:
        self.readable = select.poll()
        self.readable.register(self.conn.fileno(), select.POLLIN)
        self.reader = FrameReader(self.conn.fileno())
        self.watched = True
        self._pid: int = self.process.pid or 0
        self._exitcode: int | None = None
        #: Where its jobs (and cancels, and exit) are written.
        self.out_fd = self.conn.fileno() if self.jobs_conn is None else self.jobs_conn.fileno()
        #: Our read end of a one-way pipe is non-blocking: :meth:`.pool.Pool.receive`
        #: reads without asking poll first (one system call, not two, per look).
        #: Not one end used both ways (a socket): writes to it must block.
        self.nonblocking = self.jobs_conn is not None
        if self.nonblocking:
            os.set_blocking(self.conn.fileno(), False)

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

    def close_pipes(self) -> None:
        self.conn.close()
        if self.jobs_conn is not None:
            self.jobs_conn.close()
        if self.records_conn is not None:
            self.records_conn.close()

    @property
    def head(self) -> int | None:
        """The seq of the job it is running, if any (the first of those it runs)."""
        return next(iter(self.inflight), None)

    def runs(self, seq: int) -> bool:
        """Job ``seq`` is running in it (not waiting in its pipe)."""
        return seq in self.tasks or seq == self.head

    def start_tasks(self, now: float, limit: int) -> list[int]:
        """Mark the async jobs it starts now running, as the child's rule says; which.

        Its jobs run in order: the async ones at the front, up to ``limit``,
        beside each other; a plain job ends the run of them.
        """
        tasks, concurrent = self.tasks, self.concurrent
        started: list[int] = []
        for seq, (msgid, size) in self.inflight.items():
            if seq in tasks:
                continue
            if seq not in concurrent or len(tasks) >= limit:
                break
            tasks[seq] = now
            if size:  # it left the pipe
                self.queued_bytes -= size
                self.inflight[seq] = (msgid, 0)
            started.append(seq)
        return started

    def forget(self, seq: int) -> None:
        """Job ``seq`` is no longer in it."""
        self.concurrent.discard(seq)
        self.tasks.pop(seq, None)


@dataclass(frozen=True, slots=True)
class Lost:
    """A job that was in a child when it died; ``started``: it was running."""

    seq: int
    msgid: str
    pid: int
    exitcode: int | None
    started: bool


@dataclass(slots=True)
class Taken:
    """What a stopped child held: jobs not started, records not yet handled, and
    the jobs it was running (several when async jobs ran beside each other)."""

    queued: list[int]
    records: list[bytes]
    running: list[int] = field(default_factory=list)
