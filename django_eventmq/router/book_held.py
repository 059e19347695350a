"""Jobs held apart from the wait queues: delayed ones (a delay, a retry's
back-off) promoted when due, ones a rate limit parked, a CANCEL of a job not
handed out, and poisoned ones (admin POISONED_RETRY / POISONED_PURGE).

A mixin of :class:`.book.Book` (the state it uses belongs to the book).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from django_eventmq.protocol.status import JobStatus
from django_eventmq.router.dedup import FinishedWindow
from django_eventmq.router.journal.api import JournalLike
from django_eventmq.router.journal.store import (
    DELAYED,
    LEASED,
    POISONED,
    WAITING,
    JournalUnavailable,
    Row,
)
from django_eventmq.router.rate_limits import RateLimits
from django_eventmq.router.routing import RoutedJob, Routing
from django_eventmq.router.stored import job_from_row
from django_eventmq.router.unique import UniqueKeys
from django_eventmq.runtime.logs import job_debug
from django_eventmq.runtime.stats import Stats

log = logging.getLogger("django_eventmq.router")

#: The reply a client that asked for one gets for a job cancelled before it ran.
CANCELLED_PAYLOAD = (
    '{"value": null, "error": {"type": "Cancelled", "message": "cancelled before it ran",'
    ' "traceback": ""}}'
)

#: Seconds added to a parked job's due time: the wall and monotonic clocks are read
#: apart, and a job promoted a hair early would be parked again at the back.
PARK_MARGIN = 0.002


class BookHeld:
    """Delayed, parked, cancelled and poisoned jobs (mixed into the book)."""

    journal: JournalLike
    routing: Routing
    rate_limits: RateLimits
    stats: Stats
    finished: FinishedWindow
    unique: UniqueKeys
    delayed: Counter[str]
    poisoned: Counter[str]
    _next_due: float | None

    if TYPE_CHECKING:

        def pump(self, now: float, queues: list[str] | None = None) -> None: ...

        def _open_parcel(self, seq: int) -> None: ...

        def _finish(
            self, job: RoutedJob, payload: str | None, *, committed: bool = False
        ) -> None: ...

    # -- delayed jobs ------------------------------------------------------------------
    def next_due(self) -> float | None:
        """When a delayed job is due (None too while the journal cannot be written:
        they are promoted once it can)."""
        due = None if self.journal.failure is not None else self._next_due
        wake = self.rate_limits.wake_in()  # a queue at its rate limit may go on
        if wake is not None:
            at = time.time() + wake
            due = at if due is None else min(due, at)
        return due

    def promote_due(self, wall: float, now: float) -> None:
        """Delayed jobs whose time has come start waiting (or run)."""
        if self.rate_limits.parked:
            self.settle_parked()
        held = self.rate_limits.due_queues()
        if held:
            self.pump(now, held)
        if self._next_due is None or wall < self._next_due or self.journal.failure is not None:
            return
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
            self._next_due = self.journal.next_due()
        except JournalUnavailable:
            pass  # _next_due stays: tried again once the journal can be written
        self.pump(now, sorted(queues))

    # -- rate limits (see .rate_limits) ---------------------------------------------------
    def settle_parked(self) -> None:
        """Jobs a wait queue held back by their key's rate limit wait as delayed until
        they may go (in the journal, so a flood of them costs no memory)."""
        limits = self.rate_limits
        parked, limits.parked = limits.parked, []
        wall, mono = time.time(), limits.clock()
        for job, at in parked:
            if job.msgid in self.finished:  # cancelled meanwhile
                limits.unparked(job.queue)
                continue
            due = wall + (at - mono) + PARK_MARGIN
            self.journal.delay(job.seq, due, job.attempts)
            self.delayed[job.queue] += 1
            if self._next_due is None or due < self._next_due:
                self._next_due = due
            job_debug(log, "rate limit reached: waits %.3fs", job.msgid, job.queue, due - wall)

    # -- cancelling --------------------------------------------------------------------
    def cancel(self, msgid: str) -> RoutedJob | None:
        """CANCEL: drop the job if it has not been handed out.

        Returns the job when it is running (the caller forwards CANCEL to its
        worker if that worker can take it); None otherwise.
        """
        running = self.routing.inflight.get(msgid)
        if running is not None:
            return running
        job = self.routing.waiting.index.get(msgid)
        if job is not None:
            self.routing.waiting.queue(job.queue).discard(job)
        else:
            try:
                found = self.journal.find(msgid)
                if found is None:
                    for seq in self.journal.parcels_holding(msgid):
                        self._open_parcel(seq)
                    found = self.journal.find(msgid)
            except JournalUnavailable as exc:
                log.warning("CANCEL for msgid %s not applied: journal: %s", msgid, exc.reason)
                return None
            if found is None:
                log.debug("CANCEL for msgid %s: not held", msgid)
                return None
            state, row = found
            if state == LEASED:
                return None
            job = job_from_row(row, 0.0)
            if state == WAITING:
                self.routing.waiting.queue(row.queue).forget_on_disk()
            elif state == DELAYED:
                self.delayed[row.queue] -= 1
                self.rate_limits.unparked(row.queue, row.headers)
            elif state == POISONED:
                self.poisoned[row.queue] -= 1
        self.stats.finish(job.queue, JobStatus.CANCELLED)
        self._finish(job, CANCELLED_PAYLOAD, committed=True)  # "never runs": once stored
        job_debug(log, "cancelled before it ran", msgid, job.queue)
        return None

    # -- poisoned jobs (admin POISONED_RETRY / POISONED_PURGE) -----------------------------
    def _take_poisoned(self, msgids: Iterable[str]) -> list[Row]:
        """The rows of those of ``msgids`` poisoned here, no longer counted as poisoned."""
        rows = []
        for msgid in msgids:
            found = self.journal.find(msgid)
            if found is not None and found[0] == POISONED:
                self.poisoned[found[1].queue] -= 1
                rows.append(found[1])
        return rows

    def retry_poisoned(self, msgids: Iterable[str], now: float) -> list[str]:
        """Poisoned jobs wait again with their deaths forgotten; the msgids that were
        poisoned here (others are not touched)."""
        rows = self._take_poisoned(msgids)
        # They hold their unique keys again (freed when they were set aside).
        self.unique.rebuild((row.msgid, row.headers, row.accepted) for row in rows)
        for row in rows:
            self.journal.unpoison(row.seq)
            job = job_from_row(row, now)
            job.deaths = 0
            self.routing.waiting.push(job)
            log.info("poisoned job msgid=%s queue=%s waits again (admin)", row.msgid, row.queue)
        self.pump(now, sorted({row.queue for row in rows}))
        return [row.msgid for row in rows]

    def purge_poisoned(self, msgids: Iterable[str]) -> list[str]:
        """Poisoned jobs deleted from the journal; the msgids that were poisoned here."""
        rows = self._take_poisoned(msgids)
        for row in rows:
            self.journal.delete(row.seq)
            log.info("poisoned job msgid=%s queue=%s purged (admin)", row.msgid, row.queue)
        return [row.msgid for row in rows]
