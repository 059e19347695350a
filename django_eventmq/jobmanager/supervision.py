"""Supervision of the worker children: reap dead ones, retire worn ones, time
jobs out, start replacements, renew them all on a warm restart (SIGHUP), and
grow or shrink their number (AUTOSCALE).

The job manager holds one :class:`Supervision` and runs a pass when it is
due (:attr:`Supervision.next_at`) or asked for (:meth:`Supervision.wake`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from django_eventmq.jobmanager.credit import Credit
from django_eventmq.jobmanager.lifecycle import Lifecycle
from django_eventmq.jobmanager.outcomes import Recorder
from django_eventmq.jobmanager.pool import Pool, Status
from django_eventmq.jobmanager.running import RunningReport
from django_eventmq.runtime.settings import Settings

logger = logging.getLogger("django_eventmq.jobmanager")

#: Seconds between supervision passes (reap / check / respawn) when nothing
#: prompts one sooner.
SUPERVISE_EVERY = 0.2


class Supervision:
    """Supervision passes, warm restarts and autoscaling of one job manager's children."""

    def __init__(
        self,
        settings: Settings,
        pool: Pool,
        lifecycle: Lifecycle,
        credit: Credit,
        recorder: Recorder,
        links: Sequence[Any],
        *,
        stopping: Callable[[], bool],
        check_trouble: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.prefetch = pool.prefetch
        self.lifecycle = lifecycle
        self.jobs = lifecycle.jobs
        self.credit = credit
        self.recorder = recorder
        self.links = links
        self._stopping = stopping
        #: Stops taking jobs while no worker process can start (the job manager's).
        self._check_trouble = check_trouble
        #: ``(MIN, MAX)`` worker processes when autoscaling (AUTOSCALE), else None.
        self.autoscale = settings.autoscale_bounds
        #: What the children run, told to the routers (emq_status --jobs).
        self.running = RunningReport()
        #: When the next pass is due (monotonic; 0: at the next turn).
        self.next_at = 0.0
        #: Set by SIGHUP (:meth:`reload`): renew the children at the next pass.
        self.reload_asked = False

    def reload(self) -> None:
        """Renew the children at the next turn (only sets flags: safe from a signal handler)."""
        self.reload_asked = True
        self.next_at = 0.0

    def wake(self) -> None:
        """Run a pass at the next turn (a child died, or retired)."""
        self.next_at = 0.0

    def supervise(self, now: float) -> None:
        """Reap dead children, retire worn ones, time jobs out, start replacements."""
        self.next_at = now + SUPERVISE_EVERY
        pool, lifecycle = self.pool, self.lifecycle
        pool.check(now)
        self.recorder.resend(pool.orphan_records())
        lifecycle.lost(now)
        lifecycle.check_timeouts(now)
        lifecycle.due_retries(now)
        if not self._stopping():
            if self.reload_asked:
                self._renew(now)
            if self.autoscale is not None:
                self._autoscale(now)
            pool.respawn(now)
            self._check_trouble()
        if lifecycle.pending:
            lifecycle.dispatch(now)
        self.credit.top_up()
        self.running.turn(now, pool.active(), self.jobs, self.links)

    def _renew(self, now: float) -> None:
        self.reload_asked = False
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
        # supervise()'s top-up offers the new children's slots and the headroom.
        self.credit.headroom = high - size if saturated else 0
        if size > low and pool.retire_idle(self.settings.autoscale_idle, low, now):
            logger.info(
                "autoscale: %d -> %d workers (idle for %gs)",
                size,
                pool.size,
                self.settings.autoscale_idle,
            )
