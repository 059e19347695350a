"""In the job manager: the partials of running jobs, on their way to the router.

A worker child lets at most ``PARTIAL_RATE`` partials a second per job
through (:class:`.progress.PartialGate`, the child's side); :class:`Coalescer`
bounds them again here, so no child can flood the router. :class:`Partials`
is the feature as the job manager's lifecycle uses it, and a stage
(:mod:`.stages`) that joins the plan of a job at its first partial: its held
partial goes before its outcome. A job that reports none never calls it.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from django_eventmq.jobmanager.child_handles import Child
from django_eventmq.jobmanager.managed_job import ManagedJob
from django_eventmq.jobmanager.pipe import PARTIAL_INTERVAL
from django_eventmq.jobmanager.stages import Plan, Stage
from django_eventmq.protocol.headers import Headers

K = TypeVar("K", bound=Hashable)


class Coalescer(Generic[K]):
    """Lets at most one partial per ``interval`` seconds through per key; the rest coalesce.

    Sans-IO: times are passed in. ``send(key, payload)`` is called for each
    partial let through. A partial that comes too soon is held (a newer one
    replaces it) until :meth:`flush_due` finds its time has come, or
    :meth:`flush` sends it early (just before the job's outcome).
    """

    def __init__(self, send: Callable[[K, str], None], interval: float = PARTIAL_INTERVAL) -> None:
        self.send = send
        self.interval = interval
        self._last: dict[K, float] = {}
        self._held: dict[K, str] = {}
        self._due: list[tuple[float, int, K]] = []
        self._order = itertools.count()
        #: Partials replaced by a newer one before they were sent.
        self.coalesced = 0

    def offer(self, key: K, payload: str, now: float) -> None:
        """A new partial for ``key``: sent now, or held until its turn."""
        last = self._last.get(key)
        if key in self._held:
            self._held[key] = payload
            self.coalesced += 1
        elif last is None or now - last >= self.interval:
            self._last[key] = now
            self.send(key, payload)
        else:
            self._held[key] = payload
            heapq.heappush(self._due, (last + self.interval, next(self._order), key))

    def flush_due(self, now: float) -> None:
        """Send held partials whose turn has come."""
        due = self._due
        while due and due[0][0] <= now:
            _, _, key = heapq.heappop(due)
            payload = self._held.pop(key, None)
            if payload is not None:
                self._last[key] = now
                self.send(key, payload)

    def flush(self, key: K) -> None:
        """Send ``key``'s held partial now (its outcome follows), and forget the key."""
        payload = self._held.pop(key, None)
        self._last.pop(key, None)
        if payload is not None:
            self.send(key, payload)

    def next_due(self) -> float | None:
        """When :meth:`flush_due` next has something to send (None: nothing held)."""
        due, held = self._due, self._held
        while due and due[0][2] not in held:
            heapq.heappop(due)  # flushed early
        return due[0][0] if due else None

    def __len__(self) -> int:
        return len(self._held)


class Partials(Stage):
    """Progress and partials, the job manager's side: a feature plugged into the job's path.

    Takes the partials a child read (:meth:`take`), lets at most
    ``PARTIAL_RATE`` a second per job through (:class:`Coalescer`) to the
    router (``send``) and to the job's ``progress`` stages (its records, for a
    recorded job); :meth:`reporting` sends a job's held partial before its
    outcome. A job that reports none costs one look at its child's (empty)
    list per read.
    """

    def __init__(self, send: Callable[[ManagedJob, str], None]) -> None:
        self._send = send
        #: The plan of a job that reported a partial, by its plan before; and those.
        self._joined: dict[Plan, Plan] = {}
        self._joined_plans: set[Plan] = set()
        self.coalescer: Coalescer[ManagedJob] = Coalescer(self._let_through)
        # The coalescer's own methods, not wrappers: reporting() runs once per job.
        self.flush = self.coalescer.flush
        self.reporting = self.coalescer.flush  # type: ignore[method-assign]
        self.flush_due = self.coalescer.flush_due
        self.next_due = self.coalescer.next_due

    def __len__(self) -> int:
        """Partials held back, waiting for their turn."""
        return len(self.coalescer)

    def take(self, child: Child, jobs: dict[int, ManagedJob], now: float) -> None:
        """The partials read from ``child``'s pipe, offered in order (a job no
        longer in it, or no longer held, has none to send)."""
        offer = self.coalescer.offer
        for seq, payload in child.partials:
            job = jobs.get(seq)
            if job is not None and job.child is child:
                if job.plan not in self._joined_plans:  # its first: flush it at the end
                    job.plan = self._join(job.plan)
                offer(job, payload, now)
        child.partials.clear()

    def wants(self, headers: Headers, record: bool) -> bool:
        return False  # no job from the start: it joins a job's plan at its first partial

    def _join(self, plan: Plan) -> Plan:
        joined = self._joined.get(plan)
        if joined is None:
            joined = self._joined[plan] = plan.joined(self)
            self._joined_plans.add(joined)
        return joined

    def _let_through(self, job: ManagedJob, payload: str) -> None:
        """A partial let through: to the job's ``progress`` stages, and on to the router."""
        for hook in job.plan.progress:
            hook(job, payload)
        self._send(job, payload)
