"""Supervision of the worker children: reap dead ones, retire worn ones, time
jobs out, start replacements, renew them all on a warm restart (SIGHUP), and
grow or shrink their number (AUTOSCALE).

A mixin of :class:`.manager.JobManager` (the state it uses belongs to the job
manager).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from django_eventmq.jobmanager.lifecycle import Lifecycle, ManagedJob
from django_eventmq.jobmanager.pool import Pool, Status
from django_eventmq.jobmanager.prefetch import Prefetch
from django_eventmq.jobmanager.running import RunningReport
from django_eventmq.runtime.settings import Settings

logger = logging.getLogger("django_eventmq.jobmanager")

#: Seconds between supervision passes (reap / check / respawn) when nothing
#: prompts one sooner.
SUPERVISE_EVERY = 0.2


class Supervision:
    """Supervision passes and autoscaling (mixed into the job manager)."""

    settings: Settings
    pool: Pool
    prefetch: Prefetch
    lifecycle: Lifecycle
    jobs: dict[int, ManagedJob]
    links: list[Any]
    running: RunningReport
    autoscale: tuple[int, int] | None
    #: Slots offered beyond the pool's while autoscaling and every child is busy.
    _headroom: int
    _reload_asked: bool
    _next_supervise: float

    if TYPE_CHECKING:

        @property
        def stopping(self) -> bool: ...

        @property
        def slots(self) -> int: ...

        def _resend_records(self, batches: list[bytes]) -> None: ...

        def _top_up(self) -> None: ...

        def _check_trouble(self) -> None: ...

    def _supervise(self, now: float) -> None:
        """Reap dead children, retire worn ones, time jobs out, start replacements."""
        self._next_supervise = now + SUPERVISE_EVERY
        pool, lifecycle = self.pool, self.lifecycle
        pool.check(now)
        self._resend_records(pool.orphan_records())
        lifecycle.lost(now)
        lifecycle.check_timeouts(now)
        lifecycle.due_retries(now)
        if not self.stopping:
            if self._reload_asked:
                self._renew(now)
            if self.autoscale is not None:
                self._autoscale(now)
            pool.respawn(now)
            self._check_trouble()
        if lifecycle.pending:
            lifecycle.dispatch(now)
        self._top_up()
        self.running.turn(now, pool.active(), self.jobs, self.links)

    def _renew(self, now: float) -> None:
        self._reload_asked = False
        old = self.lifecycle.renew(now)
        logger.info(
            "reload: starting %d new worker processes; %d old ones finish their jobs and exit",
            self.pool.size,
            old,
        )

    @property
    def waiting(self) -> int:
        """Jobs we hold that no child runs yet (prefetched, or waiting for a child)."""
        return max(0, len(self.jobs) - self.pool.busy())

    def _autoscale(self, now: float) -> None:
        """Grow to as many children as the waiting work needs, at once; shrink once
        children idled ``AUTOSCALE_IDLE`` seconds (never a busy one).

        We cannot see the router's queues, so while every child that is up runs
        a job we offer the slots of the children we could still start
        (``headroom``): the router hands out as many jobs as it has, up to MAX,
        and each job taken beyond our own slots starts a child, all in one
        pass. Children still starting do not hold the next ones back (each
        takes 1-2 s to import the job code).
        """
        assert self.autoscale is not None
        low, high = self.autoscale
        pool = self.pool
        size = pool.size
        active = pool.active()
        up = sum(1 for child in active if child.status is Status.UP)
        busy = pool.busy()
        saturated = bool(active) and busy >= up and bool(self.jobs)
        extra = len(self.jobs) - (size + self.prefetch.value)
        if size < high and saturated and extra > 0:
            new = min(high, size + extra)
            pool.resize(new)
            logger.info(
                "autoscale: %d -> %d workers (all busy, %d jobs waiting here)",
                size,
                new,
                self.waiting,
            )
            size = new
        # _supervise's _top_up offers the new children's slots and the headroom.
        self._headroom = high - size if saturated else 0
        if size > low and pool.retire_idle(self.settings.autoscale_idle, low, now):
            logger.info(
                "autoscale: %d -> %d workers (idle for %gs)",
                size,
                pool.size,
                self.settings.autoscale_idle,
            )

    def _wake_supervisor(self) -> None:
        self._next_supervise = 0.0
