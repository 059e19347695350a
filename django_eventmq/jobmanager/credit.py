"""Credit: how many jobs the router may hand us (one per worker process plus
the prefetch), kept topped up with READY and, once a shrunk prefetch lasted,
cut back with UNREADY.

The job manager holds one :class:`Credit`; the credit itself (what each
router holds for us) is in each link's session.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django_eventmq.jobmanager.link import RouterLink
from django_eventmq.jobmanager.managed_job import ManagedJob
from django_eventmq.jobmanager.pool import Pool

#: A shrunk prefetch is told to the router (UNREADY) only once it has lasted this
#: long (seconds, by the turns' clock). The prefetch follows a moving average of
#: measured run times, and under load those include our own turns: short jobs
#: measured a few hundred microseconds apart swing it between the cap and a
#: fifth of it within a few jobs, and every swing cost an UNREADY and then a
#: READY per slot taken back (some 10 READYs per job at 6,000 jobs/s). Jobs
#: that really got long keep it down, and it is told this much later.
SHRINK_AFTER = 0.05


class Credit:
    """READY and UNREADY to each router, for the job manager's free slots."""

    def __init__(
        self,
        pool: Pool,
        jobs: dict[int, ManagedJob],
        links: Sequence[RouterLink[Any]],
        stopping: Callable[[], bool],
    ) -> None:
        self.pool = pool
        self.prefetch = pool.prefetch
        #: The jobs the job manager holds (the lifecycle's dict, shared).
        self.jobs = jobs
        self.links = links
        self._stopping = stopping
        #: Slots offered beyond the pool's while autoscaling and every child is busy
        #: (set by the supervision's autoscale pass).
        self.headroom = 0
        #: Why no job is taken now (no worker process can start): no slot is offered.
        self.trouble = ""
        #: The current turn's clock (the job manager sets it each turn).
        self.turn_at = 0.0
        #: Since when the routers hold more slots than the prefetch wants.
        self._shrink_since: float | None = None

    @property
    def slots(self) -> int:
        """Jobs we take at once: one per worker process plus the current prefetch,
        plus, while autoscaling with every child busy, one per child we could
        still start (the jobs they bring say how many to start), plus room for
        async jobs (:meth:`async_slots`)."""
        base = self.pool.size + self.prefetch.value + self.headroom
        if not self.pool.async_names:
            return base
        return base + self.async_slots()

    def async_slots(self) -> int:
        """Slots for async jobs, which run ASYNC_CONCURRENCY to a process.

        The router cannot say what the next job is, so this room follows the
        work: each async job we hold takes no slot of the processes and opens
        one more, up to ASYNC_CONCURRENCY per process (a burst of them doubles
        the credit each round trip: 50 are here within a few ms); without
        async jobs held there is none, so plain jobs are not taken in by the
        hundred. A plain job taken through it waits for the async jobs before
        it in its process (or for a free one).
        """
        held = sum(1 for job in self.jobs.values() if job.concurrent)
        room = self.pool.size * self.pool.async_limit
        return held + min(held, max(0, room - held))

    def top_up(self) -> None:
        """Send READY until the router holds one per free slot; UNREADY for too many.

        Not while stopping (nor before the mode is settled: the session's rule).
        When the prefetch shrank, a router that speaks UNREADY is told to keep
        fewer slots for us (a little excess is let be, so a wobbling prefetch
        does not cost a message per job); others just get no READY until we
        hold fewer jobs.
        """
        if self._stopping():
            return
        # No worker process can start: no slot (all taken back at once, below).
        slots = 0 if self.trouble else self.slots
        # Jobs finishing in children a warm restart replaced hold no slot of the new ones.
        free = slots - len(self.jobs) + self.pool.renewed_jobs()
        # Several groups: each may hold credit for every free slot (see the module
        # doc), and no UNREADY churn as the other groups' jobs come and go.
        slack = self.prefetch.value // 4 if len(self.links) == 1 else slots
        if self.trouble:
            slack = 0
        elif self._shrink_waits(free, slack):
            return
        for link in self.links:
            for message in link.session.top_up(free, slack=slack):
                link.send(message)

    def _shrink_waits(self, free: int, slack: int) -> bool:
        """True while every link's router holds more than ``free + slack`` slots
        for us and that began less than :data:`SHRINK_AFTER` ago: no READY is due
        then, and the UNREADY waits to see whether the prefetch stays down."""
        most = free + slack
        for link in self.links:  # a loop: all() of a generator costs more, once a turn
            if link.session.credit <= most:
                self._shrink_since = None
                return False
        now = self.turn_at
        if self._shrink_since is None:
            self._shrink_since = now
        if now - self._shrink_since < SHRINK_AFTER:
            return True
        self._shrink_since = None
        return False
