"""Jobs waiting for a worker: per queue, a bounded window in memory, the rest on disk.

Hand-out order within a queue is highest ``priority`` first, then oldest
(acceptance ``seq``), so a job put back after its worker died goes to the
front again. Each queue keeps at most ``window`` (up to twice that, briefly)
jobs in memory; with a journal the others wait only on disk and are loaded
a window at a time. The invariant that makes this simple: the jobs in
memory are exactly the waiting jobs whose key ``(-priority, seq)`` is at
most ``boundary`` (``None``: all of them), so loading more is one keyset
query "after ``boundary``".

A job whose ``expires`` time passed while it waited is not handed out: a pop
skips it into ``Waiting.expiry.expired`` (:mod:`.expiry`), for the book to
finish as expired.
Rate limits (:mod:`.rate_limits`): a queue at its limit hands nothing out; a
job whose key is at its limit is skipped into ``Waiting.limits.parked``, for
the book to delay, and the pop goes on with the next job.

Pure bookkeeping: the loader and the wall clock are callables, no I/O here.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from django_eventmq.protocol.headers import Rate
from django_eventmq.router.expiry import Expiry
from django_eventmq.router.rate_limits import RateLimits

Key = tuple[int, int]
#: Heap entries: (-priority, seq, tie-breaker, job); the tie-breaker keeps jobs
#: with equal keys (seq 0: built without a journal) from being compared.
Entry = tuple[int, int, int, "RoutedJob"]
_ties = itertools.count()
#: ``load(queue, after_key, limit)``: waiting jobs on disk after ``after_key``, in order;
#: None: the disk cannot be read now (nothing changes, a later pop tries again).
Loader = Callable[[str, "Key | None", int], "list[RoutedJob] | None"]


@dataclass(slots=True, eq=False)
class RoutedJob:
    """One accepted REQUEST, kept as the raw frames to forward to a worker."""

    msgid: str
    queue: str
    #: Frames as a DEALER sent them (no routing identity); forwarded unchanged.
    frames: list[bytes]
    #: ``guarantee`` header: handed out again if its worker dies (at-least-once).
    guarantee: bool
    accepted_at: float
    worker: bytes | None = None
    dispatched_at: float = 0.0
    #: Acceptance order (the journal's row id).
    seq: int = 0
    priority: int = 0
    #: Routing identity of the client that sent it.
    client: bytes = b""
    #: ``reply-requested`` header.
    reply: bool = False
    retry_count: int = 0
    timeout: int = 0
    #: Times its worker died running it, and retries used.
    deaths: int = 0
    attempts: int = 0
    #: Monotonic time after which a handed-out job is handed out again.
    lease_until: float = math.inf
    #: Taken out of its wait queue while still in the heap (skipped lazily).
    gone: bool = field(default=False)
    #: Unix time after which it is not handed out (``expires`` header; inf: never;
    #: nan: not read yet, see :func:`expires_at`).
    expires: float = math.nan
    #: ``(rate-key, Rate)`` of its ``rate-limit`` header, None without one; False: not
    #: read yet (see :func:`.rate_limits.job_rate`).
    rate: tuple[str, Rate] | Literal[False] | None = False

    @property
    def key(self) -> Key:
        return (-self.priority, self.seq)

    @property
    def header_frame(self) -> bytes:
        """Its REQUEST's header frame, as the client sent it."""
        return self.frames[5]

    @property
    def body(self) -> bytes:
        """Its REQUEST's body frame, as the client sent it."""
        return self.frames[6]


class WaitQueue:
    """The waiting jobs of one queue."""

    def __init__(
        self,
        name: str,
        window: int,
        load: Loader | None,
        index: dict[str, RoutedJob],
        expiry: Expiry | None = None,
        limits: RateLimits | None = None,
        aside: list[RoutedJob] | None = None,
    ) -> None:
        self.name = name
        self._aside = aside if aside is not None else []
        self._expiry = expiry if expiry is not None else Expiry()
        self._limits = limits if limits is not None else RateLimits()
        #: 0: unbounded (no disk to spill to).
        self.window = window if load is not None else 0
        self._load = load
        self._index = index
        self._heap: list[Entry] = []
        #: Jobs in memory, and all waiting jobs (memory + disk).
        self.live = 0
        self.count = 0
        self.boundary: Key | None = None

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[RoutedJob]:
        """The jobs in memory, in hand-out order."""
        return iter([entry[3] for entry in sorted(self._heap, key=_order) if not entry[3].gone])

    def spill_all(self) -> None:
        """Start with everything on disk (after a restart): the next pop loads a window."""
        self.boundary = (-(2**63), -(2**63))

    def push(self, job: RoutedJob) -> bool:
        """A job starts waiting; True if it is kept in memory (else it waits on disk)."""
        self.count += 1
        if self.boundary is None:
            if not self.window or self.live < self.window:
                self._add(job)
                return True
            self.boundary = max(_order(entry) for entry in self._heap if not entry[3].gone)
        if job.key <= self.boundary:
            self._add(job)
            if self.live > 2 * self.window:
                self._trim()
            return True
        return False

    def pop(self) -> RoutedJob | None:
        """The next job to hand out, loading more from disk when memory runs dry.

        A job past its ``expires`` time is taken out into the expiry's list instead;
        None while the queue is at its rate limit, and a job at its key's limit is
        taken out into the limits' ``parked`` list.
        """
        heap = self._heap
        passed = self._expiry.passed
        limits = self._limits
        if limits.queues and not limits.queue_open(self.name):
            return None
        parked = 0
        while True:
            while heap:
                job = heapq.heappop(heap)[3]
                if job.gone:
                    continue
                self.live -= 1
                self.count -= 1
                del self._index[job.msgid]
                if job.expires != math.inf and passed(job):
                    self._aside.append(job)
                    continue
                if (limits.queues or job.rate is not None) and not limits.admit(job):
                    self._aside.append(job)
                    parked += 1
                    if parked >= limits.park_batch:
                        limits.come_back(self.name)  # bounded work (and writes) per turn
                        return None
                    continue
                return job
            if self.boundary is None or not self._refill():
                return None

    def discard(self, job: RoutedJob) -> None:
        """Take an in-memory job out (cancelled, or finished elsewhere)."""
        job.gone = True
        self.live -= 1
        self.count -= 1
        self._index.pop(job.msgid, None)

    def forget_on_disk(self, n: int = 1) -> None:
        """``n`` jobs that waited on disk only were taken out."""
        self.count -= n

    def after_boundary(self, key: Key) -> bool:
        """True if a job with ``key`` would wait on disk only (:meth:`push` would say False)."""
        return self.boundary is not None and key > self.boundary

    def wait_on_disk(self, n: int) -> None:
        """``n`` jobs stored after the boundary (see :meth:`after_boundary`) start waiting."""
        assert self.boundary is not None
        self.count += n

    def oldest(self) -> float | None:
        """Acceptance time of the oldest job in memory."""
        times = [entry[3].accepted_at for entry in self._heap if not entry[3].gone]
        return min(times) if times else None

    def _add(self, job: RoutedJob) -> None:
        job.gone = False
        heapq.heappush(self._heap, (-job.priority, job.seq, next(_ties), job))
        self._index[job.msgid] = job
        self.live += 1

    def _refill(self) -> bool:
        assert self._load is not None
        loaded = self._load(self.name, self.boundary, self.window)
        if loaded is None:
            return False
        jobs = [job for job in loaded if not job.gone]
        self.boundary = None if len(jobs) < self.window else jobs[-1].key
        if not jobs:
            # Nothing more on disk: whatever we counted is not there (after a cancel).
            self.count = self.live
            return False
        for job in jobs:
            if job.msgid not in self._index:
                self._add(job)
        return True

    def _trim(self) -> None:
        """Keep the first ``window`` jobs in memory; the rest wait on disk only."""
        entries = sorted(e for e in self._heap if not e[3].gone)
        keep, drop = entries[: self.window], entries[self.window :]
        self._heap = keep  # a sorted list is a heap
        self.boundary = _order(keep[-1])
        self.live = len(keep)
        for entry in drop:
            self._index.pop(entry[3].msgid, None)


def _order(entry: Entry) -> Key:
    return entry[0], entry[1]


class Waiting:
    """Every queue's waiting jobs. Maps queue name -> :class:`WaitQueue` (non-empty ones)."""

    def __init__(self, window: int = 0, load: Loader | None = None) -> None:
        self.window = window
        self._load = load
        self._queues: dict[str, WaitQueue] = {}
        #: msgid -> job, for the waiting jobs in memory.
        self.index: dict[str, RoutedJob] = {}
        #: Jobs a pop found expired (the book finishes them) and the clock for it.
        self.expiry = Expiry()
        #: Rate limits (the book configures them; parked jobs are its to delay).
        self.limits = RateLimits()
        #: Every job a pop took aside (expired, parked) since the book last settled
        #: them (the ``settling`` point of :mod:`.stages`): one check for all.
        self.aside: list[RoutedJob] = []

    def queue(self, name: str) -> WaitQueue:
        found = self._queues.get(name)
        if found is None:
            found = self._queues[name] = WaitQueue(
                name, self.window, self._load, self.index, self.expiry, self.limits, self.aside
            )
        return found

    def push(self, job: RoutedJob) -> bool:
        return self.queue(job.queue).push(job)

    def pop(self, name: str) -> RoutedJob | None:
        found = self._queues.get(name)
        if found is None or not found.count:
            return None
        return found.pop()

    def get(self, name: str) -> WaitQueue | None:
        found = self._queues.get(name)
        return found if found is not None and found.count > 0 else None

    def __getitem__(self, name: str) -> WaitQueue:
        found = self.get(name)
        if found is None:
            raise KeyError(name)
        return found

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter([name for name, q in self._queues.items() if q.count > 0])

    def __len__(self) -> int:
        return sum(1 for q in self._queues.values() if q.count > 0)

    def items(self) -> list[tuple[str, WaitQueue]]:
        return [(name, q) for name, q in self._queues.items() if q.count > 0]

    def total(self) -> int:
        return sum(q.count for q in self._queues.values())

    def some_on_disk(self) -> bool:
        """True if some queue has jobs waiting on disk only (:meth:`total` above
        :meth:`memory`, in one pass). A loop: asked per REQUEST, any() costs more."""
        for queue in self._queues.values():  # noqa: SIM110
            if queue.count > queue.live:
                return True
        return False

    def memory(self) -> int:
        """Jobs held in memory, all queues."""
        return sum(q.live for q in self._queues.values())
