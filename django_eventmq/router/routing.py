"""The router's routing state: workers, free slots, waiting and in-flight requests.

Pure bookkeeping: no sockets, no clock (``now`` is passed in, monotonic
seconds). The router decides what to send; this module decides to whom.

Rules (spec + reference behaviour):

- A worker announces its queues as ``(weight, name)`` pairs and then one READY
  per free slot. Each READY allows exactly one REQUEST.
- For a queue, workers that gave it a higher weight are tried first, then the
  least recently used one (the one whose last dispatch is oldest).
- When a READY arrives and requests are waiting in that worker's queues, it
  gets the first request (highest priority, then oldest; see :mod:`.waiting`)
  of its highest-weight queue that has any (ties: the order the worker listed
  them).
- A REQUEST for a queue no free worker serves waits for that queue; it never
  runs on another queue.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from django_eventmq.protocol.messages import QueueSpec
from django_eventmq.protocol.session import RouterPeerSession
from django_eventmq.router.waiting import Loader, RoutedJob, Waiting

__all__ = ["JobManagerPeer", "RoutedJob", "Routing", "SchedulerPeer", "Schedulers"]

_NEVER = float("-inf")


@dataclass(slots=True, eq=False)
class JobManagerPeer:
    """A job manager connected to the backend.

    What it negotiated (its INFORM, the features it announced), its credit
    (free slots, UNREADY debt) and whether it is stopping are in its
    :attr:`session`; the rest is routing.
    """

    identity: bytes
    session: RouterPeerSession
    queues: QueueSpec
    #: Queue names, highest weight first (ties keep the announced order).
    order: tuple[str, ...]
    last_heard: float
    last_sent: float
    last_dispatch: float = _NEVER
    inflight: deque[RoutedJob] = field(default_factory=deque)
    #: Changes whenever the worker's place in the LRU heaps changes.
    stamp: int = 0
    #: What its worker processes run, from its last RUNNING: ``{msgid: (pid, started)}``
    #: (started: our monotonic clock); None: it sent none (a reference job manager).
    running: dict[str, tuple[int, float]] | None = None

    @property
    def slots(self) -> int:
        """Free slots it announced and we have not used (its session's credit)."""
        return self.session.credit

    @property
    def stopping(self) -> bool:
        """It is shutting down (NACK "stopping"): no more jobs for it; it keeps its
        in-flight ones."""
        return self.session.stopping

    @property
    def debt(self) -> int:
        """Slots it took back with UNREADY while none was free: the next ones it
        frees (DONE, NACK, READY) pay this off instead of becoming free."""
        return self.session.debt


def _dedupe(queues: QueueSpec) -> QueueSpec:
    """Each queue once, with the highest weight it was given, in announced order."""
    best: dict[str, int] = {}
    for weight, name in queues:
        best[name] = max(weight, best.get(name, weight))
    return tuple((weight, name) for name, weight in best.items())


class Routing:
    """Workers, their free slots, and the requests waiting for or running on them."""

    def __init__(self, window: int = 0, load: Loader | None = None) -> None:
        self.workers: dict[bytes, JobManagerPeer] = {}
        #: Jobs no free worker could take yet (``load`` reads more from disk).
        self.waiting = Waiting(window, load)
        #: msgid -> job, for every job dispatched and not known to be finished,
        #: including those of workers that left (until their lease runs out).
        self.inflight: dict[str, RoutedJob] = {}
        self.processed_by_queue: Counter[str] = Counter()
        self.processed_by_worker: Counter[bytes] = Counter()
        self.requeued = 0
        # queue -> weight -> heap of (last_dispatch, seq, stamp, identity) for
        # workers with free slots. Entries are invalidated lazily by ``stamp``.
        self._heaps: dict[str, dict[int, list[tuple[float, int, int, bytes]]]] = {}
        # queue -> weight -> number of workers in that tier.
        self._members: dict[str, Counter[int]] = {}
        # queue -> weights, highest first.
        self._weights: dict[str, list[int]] = {}
        self._seq = itertools.count(1)

    # -- workers ------------------------------------------------------------
    def add_worker(
        self,
        identity: bytes,
        queues: QueueSpec,
        now: float,
        session: RouterPeerSession | None = None,
    ) -> list[RoutedJob]:
        """Register a worker (no free slots until it says READY).

        ``session``: the conversation that answered its INFORM (without one, as
        in tests of the routing alone, the worker is registered with ``queues``).
        A worker that INFORMs again restarted: its old registration is removed
        and the jobs it had are returned (see :meth:`remove_worker`).
        """
        released = self.remove_worker(identity) if identity in self.workers else []
        if session is None:
            session = RouterPeerSession.registered(queues)
        spec = _dedupe(queues)
        order = tuple(name for _, name in sorted(spec, key=lambda wn: -wn[0]))
        worker = JobManagerPeer(
            identity=identity,
            session=session,
            queues=spec,
            order=order,
            last_heard=now,
            last_sent=now,
            stamp=next(self._seq),
        )
        self.workers[identity] = worker
        for weight, name in spec:
            members = self._members.setdefault(name, Counter())
            if not members[weight]:
                self._heaps.setdefault(name, {})[weight] = []
                self._weights[name] = sorted((*members, weight), reverse=True)
            members[weight] += 1
        return released

    def remove_worker(self, identity: bytes) -> list[RoutedJob]:
        """Forget a worker; returns the jobs it had, oldest first.

        They stay in :attr:`inflight` (still handed out) until the caller
        decides (:class:`.book.Book`): release them and wait them again, drop them,
        or wait for a late report.
        """
        worker = self.workers.pop(identity, None)
        if worker is None:
            return []
        for weight, name in worker.queues:
            members = self._members[name]
            members[weight] -= 1
            if not members[weight]:
                del members[weight]
                del self._heaps[name][weight]
                self._weights[name] = sorted(members, reverse=True)
            if not members:
                del self._members[name], self._heaps[name], self._weights[name]
        released = list(worker.inflight)
        worker.inflight.clear()
        return released

    def stop_dispatching(self, identity: bytes) -> None:
        """The worker is stopping: its free slots vanish and no slot it frees is used.

        Its in-flight jobs stay with it until it reports them or is lost.
        """
        worker = self.workers.get(identity)
        if worker is None or worker.stopping:
            return
        worker.session.stop()  # what it announced before stopping is void
        worker.stamp = next(self._seq)  # invalidates its heap entries

    def expired(self, now: float, timeout: float) -> list[bytes]:
        """Workers silent for longer than ``timeout`` seconds."""
        return [i for i, w in self.workers.items() if now - w.last_heard > timeout]

    # -- jobs ---------------------------------------------------------------
    def free_worker(self, queue: str) -> JobManagerPeer | None:
        """The worker :meth:`submit` would pick for ``queue`` now, if any."""
        return self._pick(queue)

    def submit(self, job: RoutedJob, now: float) -> JobManagerPeer | None:
        """Dispatch ``job`` to the best free worker (returned), or make it wait."""
        worker = self._pick(job.queue)
        limits = self.waiting.limits
        if worker is not None and limits.limited(job):
            if not limits.queue_open(job.queue):
                worker = None
            elif not limits.admit(job):
                self.waiting.aside.append(job)  # parked by its key's rate limit
                return None  # (the book delays it: the ``settling`` point)
        if worker is None:
            self.waiting.push(job)
            return None
        self._dispatch(worker, job, now)
        return worker

    def ready(self, identity: bytes, now: float) -> RoutedJob | None:
        """A READY from a known worker: one more slot. Returns a waiting job the
        worker now runs.

        A READY never says a job finished. A reference job manager (no DONE) also
        sends one for a worker process that replaced one that died, so taking it
        for "the oldest job finished" credited the wrong job: the jobs it gets ask
        for a reply (the router's backend adds ``reply-requested``), and its REPLY
        names each job that ended (:meth:`reply`). A job whose process died is
        never named: it stays in flight until its lease runs out or its job
        manager is lost, then it is handed out again.
        """
        worker = self.workers[identity]
        if not worker.session.free_slot():
            return None  # stopping, or paid UNREADY debt
        return self._after_free_slot(worker, now)

    def done(
        self, identity: bytes, msgid: str, now: float
    ) -> tuple[RoutedJob | None, RoutedJob | None]:
        """A DONE from a known worker: ``msgid`` left it and its slot is free.

        Returns the job (None if it was not handed out: already requeued or
        finished) and a waiting job the worker now runs.
        """
        worker = self.workers[identity]
        job = self.release_from(identity, msgid)
        if not worker.session.job_reported():
            return job, None  # stopping (no slot it frees is used), or paid UNREADY debt
        return job, self._after_free_slot(worker, now)

    def adopt(self, identity: bytes, job: RoutedJob, now: float) -> bool:
        """``job`` runs on the worker already (its FEATURES named it as held, after a
        failover or a reconnect): in flight there from ``now``, no REQUEST to send.

        It takes none of the worker's free slots: a job manager's READYs leave
        out the jobs it holds, so the slot it uses was never announced; the
        job's DONE or NACK frees it, as for a job handed out. False if the
        worker is not connected.
        """
        worker = self.workers.get(identity)
        if worker is None:
            return False
        worker.inflight.append(job)
        job.worker = identity
        job.dispatched_at = now
        self.inflight[job.msgid] = job
        return True

    def unready(self, identity: bytes, count: int) -> None:
        """UNREADY: the worker takes back ``count`` slots (it wants fewer jobs).

        Free slots go first; the rest is owed, paid by the next slots it frees,
        so jobs already on their way to it (which used slots it counted as
        free) still add up on both sides.
        """
        worker = self.workers.get(identity)
        if worker is None or worker.stopping or count <= 0:
            return
        session = worker.session
        if session.take_back(count) and not session.credit:
            worker.stamp = next(self._seq)  # out of the LRU heaps

    def _after_free_slot(self, worker: JobManagerPeer, now: float) -> RoutedJob | None:
        job = self._take_waiting(worker)
        if job is not None:
            self._dispatch(worker, job, now)
        elif worker.session.credit == 1:
            self._push(worker)
        return job

    def reply(self, identity: bytes, msgid: str) -> RoutedJob | None:
        """``identity`` replied for ``msgid``: that job finished (counted). None if it
        is not in flight there (another worker holds it now: that run is over)."""
        job = self.inflight.get(msgid)
        if job is None or job.worker != identity:
            return None
        self.release(job)
        self.count_finished(job, identity)
        return job

    def release_from(self, identity: bytes, msgid: str) -> RoutedJob | None:
        """Take ``msgid`` off its worker (:meth:`release`) on a report from ``identity``:
        None, the job left where it is, if another worker holds it now (its lease ran out on
        ``identity``, or ``identity`` left, and it was handed out again): that
        report is about a run that is over."""
        job = self.inflight.get(msgid)
        if job is None or job.worker not in (None, identity):
            return None
        self.release(job)
        return job

    def held_elsewhere(self, identity: bytes, msgid: str) -> bytes | None:
        """The worker other than ``identity`` that holds ``msgid`` now, if one does."""
        job = self.inflight.get(msgid)
        holder = job.worker if job is not None else None
        return holder if holder not in (None, identity) else None

    def release(self, job: RoutedJob) -> None:
        """Take a handed-out job off its worker and out of :attr:`inflight`."""
        if self.inflight.get(job.msgid) is job:
            del self.inflight[job.msgid]
        identity = job.worker
        worker = self.workers.get(identity) if identity is not None else None
        if worker is not None:
            with contextlib.suppress(ValueError):
                worker.inflight.remove(job)
        job.worker = None

    def count_finished(self, job: RoutedJob, identity: bytes) -> None:
        self.processed_by_queue[job.queue] += 1
        self.processed_by_worker[identity] += 1

    def undo(self, job: RoutedJob) -> None:
        """Sending ``job`` to its worker failed: back to the front of its queue.

        The worker keeps its slot; the caller decides whether to drop the worker.
        """
        identity = job.worker
        worker = self.workers.get(identity) if identity is not None else None
        self.release(job)
        if worker is not None and not worker.stopping:
            session = worker.session
            if session.free_slot() and session.credit == 1:
                self._push(worker)
        self.waiting.push(job)

    def dispatch_waiting(self, queue: str, now: float) -> tuple[JobManagerPeer, RoutedJob] | None:
        """Hand the first waiting job of ``queue`` to a free worker, if there is one."""
        if queue not in self.waiting:
            return None
        worker = self._pick(queue)
        if worker is None:
            return None
        job = self.waiting.pop(queue)
        if job is None:
            return None
        self._dispatch(worker, job, now)
        return worker, job

    # -- views ---------------------------------------------------------------
    def queue_members(self, queue: str) -> list[tuple[int, bytes]]:
        """``(weight, identity)`` of the workers serving ``queue``, highest weight first."""
        pairs = [
            (weight, w.identity)
            for w in self.workers.values()
            for weight, name in w.queues
            if name == queue
        ]
        return sorted(pairs, key=lambda p: -p[0])

    def queue_names(self) -> Iterable[str]:
        return self._weights.keys()

    def served_queues(self) -> set[str]:
        """Queues some connected job manager takes jobs of (one that is stopping takes none)."""
        return {name for w in self.workers.values() if not w.stopping for _, name in w.queues}

    def unserved(self, served: set[str] | None = None) -> dict[str, int]:
        """Queues with jobs waiting that no job manager serves, and how many wait."""
        if served is None:
            served = self.served_queues()
        return {q: w.count for q, w in self.waiting.items() if w.count and q not in served}

    # -- internals -----------------------------------------------------------
    def _pick(self, queue: str) -> JobManagerPeer | None:
        heaps = self._heaps.get(queue)
        if not heaps:
            return None
        for weight in self._weights[queue]:
            heap = heaps[weight]
            while heap:
                _, _, stamp, identity = heap[0]
                worker = self.workers.get(identity)
                if worker is not None and worker.stamp == stamp and worker.session.credit > 0:
                    return worker
                heapq.heappop(heap)
        return None

    def _push(self, worker: JobManagerPeer) -> None:
        """Put a worker with free slots in the LRU heap of each of its tiers."""
        entry = (worker.last_dispatch, next(self._seq), worker.stamp, worker.identity)
        for weight, name in worker.queues:
            heapq.heappush(self._heaps[name][weight], entry)

    def _dispatch(self, worker: JobManagerPeer, job: RoutedJob, now: float) -> None:
        session = worker.session
        session.hand_out()
        worker.last_dispatch = now
        worker.stamp = next(self._seq)  # invalidates its heap entries
        worker.inflight.append(job)
        job.worker = worker.identity
        job.dispatched_at = now
        self.inflight[job.msgid] = job
        if session.credit > 0:
            self._push(worker)

    def _take_waiting(self, worker: JobManagerPeer) -> RoutedJob | None:
        for name in worker.order:
            job = self.waiting.pop(name)
            if job is not None:
                return job
        return None


@dataclass(slots=True, eq=False)
class SchedulerPeer:
    """A scheduler connected to the frontend."""

    identity: bytes
    last_heard: float
    last_sent: float


class Schedulers:
    """Connected schedulers, round robin for SCHEDULE, and how many messages wait for one."""

    def __init__(self) -> None:
        self.peers: dict[bytes, SchedulerPeer] = {}
        self._turn: deque[bytes] = deque()
        #: SCHEDULE / UNSCHEDULE messages kept in the journal until a scheduler takes them.
        self.stored = 0

    def add(self, identity: bytes, now: float) -> bool:
        """Register (or refresh) a scheduler; True when it is new."""
        known = identity in self.peers
        self.peers[identity] = SchedulerPeer(identity, last_heard=now, last_sent=now)
        if not known:
            self._turn.append(identity)
        return not known

    def remove(self, identity: bytes) -> bool:
        if self.peers.pop(identity, None) is None:
            return False
        self._turn.remove(identity)
        return True

    def next(self) -> SchedulerPeer | None:
        """The next scheduler in turn (round robin), or None."""
        if not self._turn:
            return None
        identity = self._turn[0]
        self._turn.rotate(-1)
        return self.peers[identity]

    def expired(self, now: float, timeout: float) -> list[bytes]:
        return [i for i, s in self.peers.items() if now - s.last_heard > timeout]
