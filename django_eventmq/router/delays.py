"""Delayed jobs: a delay, a retry's back-off, or a rate limit's wait; kept in the
journal (state DELAYED) and promoted when due.

A job whose ``rate-key`` is at its rate limit is skipped by a pop into
``RateLimits.parked`` (:mod:`.rate_limits`); ``RateLimits.settle`` delays it
here until it may go, so a flood of them costs no memory.
"""

from __future__ import annotations

import logging
import time
from collections import Counter

from django_eventmq.router.journal.api import JournalLike
from django_eventmq.router.journal.store import JournalUnavailable
from django_eventmq.router.rate_limits import RateLimits
from django_eventmq.router.routing import RoutedJob, Routing
from django_eventmq.router.stored import job_from_row

log = logging.getLogger("django_eventmq.router")


class Delays:
    """The delayed jobs per queue and when the next one is due."""

    def __init__(
        self,
        journal: JournalLike,
        routing: Routing,
        rate_limits: RateLimits,
    ) -> None:
        self.journal = journal
        self.routing = routing
        self.rate_limits = rate_limits
        #: Delayed jobs per queue.
        self.delayed: Counter[str] = Counter()
        #: When the first delayed job is due (Unix time; None: none is).
        self.due_at: float | None = None

    def next_due(self) -> float | None:
        """When a delayed job is due (None too while the journal cannot be written:
        they are promoted once it can)."""
        due = None if self.journal.failure is not None else self.due_at
        wake = self.rate_limits.wake_in()  # a queue at its rate limit may go on
        if wake is not None:
            at = time.time() + wake
            due = at if due is None else min(due, at)
        return due

    def delay(self, job: RoutedJob, due: float) -> None:
        """``job`` waits, DELAYED in the journal, until ``due`` (Unix time)."""
        self.journal.delay(job.seq, due, job.attempts)
        self.delayed[job.queue] += 1
        self.due_sooner(due)

    def due_sooner(self, due: float) -> None:
        """A delayed job is due at ``due``: wake up for it."""
        if self.due_at is None or due < self.due_at:
            self.due_at = due

    def promote(self, wall: float, now: float) -> list[str] | None:
        """Delayed jobs whose time has come wait in their queues; the queues to pump
        (None: none was due, or the journal cannot be written)."""
        if self.due_at is None or wall < self.due_at or self.journal.failure is not None:
            return None
        queues: set[str] = set()
        try:
            while True:
                rows = self.journal.take_due(wall)
                for row in rows:
                    job = job_from_row(row, now)
                    self.delayed[job.queue] -= 1
                    self.rate_limits.unparked(row.queue, row.headers)
                    self.routing.waiting.push(job)
                    queues.add(job.queue)
                if len(rows) < 1000:
                    break
            self.due_at = self.journal.next_due()
        except JournalUnavailable:
            pass  # due_at stays: tried again once the journal can be written
        return sorted(queues)
