"""What job managers report about their jobs: READY, REPLY, DONE, NACK, and the
jobs one says it still holds (FEATURES ``holding``). What becomes of a job then
is :mod:`.outcomes`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from django_eventmq.protocol.extensions import payload_error
from django_eventmq.protocol.status import JobStatus
from django_eventmq.router.journal.store import LEASED, WAITING, JournalUnavailable
from django_eventmq.router.routing import RoutedJob
from django_eventmq.router.stages import ReportHook
from django_eventmq.router.stored import job_from_row
from django_eventmq.runtime.logs import job_debug
from django_eventmq.runtime.outbox import show

if TYPE_CHECKING:
    from django_eventmq.router.book import Book

log = logging.getLogger("django_eventmq.router")

#: The NACK reason of a job manager that is shutting down (jobmanager/lifecycle.py sends it).
NACK_STOPPING = "stopping"


class Reports:
    """Reports from job managers about their jobs."""

    def __init__(self, book: Book) -> None:
        """``book``: the book this is part of (hand-outs, leases, its outcomes)."""
        self.book = book
        self.journal = book.journal
        self.routing = book.routing
        self.finished = book.finished
        self.stats = book.stats
        self.outcomes = book.outcomes
        #: The features plugged into the points (:mod:`.stages`).
        self._stages = book.stages
        #: Jobs a pop took aside (the book settles them: the ``settling`` point).
        self._aside = book.routing.waiting.aside
        #: Waiting jobs kept in flight on the job manager that said it holds them.
        self.adopted = 0

    # -- reports from workers ---------------------------------------------------------
    def ready(self, identity: bytes, now: float) -> None:
        job = self.routing.ready(identity, now)
        if job is not None:
            self.book.hand_out(self.routing.workers[identity], job, now)
        if self._aside:
            self.book.settle()

    def reply(self, identity: bytes, msgid: str) -> bytes | None:
        """A worker's REPLY (the reference's way) finished ``msgid``; returns its client."""
        job = self.routing.reply(identity, msgid)
        if job is None:
            if self.routing.held_elsewhere(identity, msgid) is not None:
                self._stale(identity, msgid, "REPLY")
                return None
            job = self._reported_waiting(msgid, "REPLY")
            if job is None:
                return None
        job_debug(log, "finished: REPLY from %s", msgid, job.queue, show(identity))
        # A reference job manager does not say how it went.
        self.stats.finish(job.queue, JobStatus.UNKNOWN)
        self.outcomes.forget_finished(job)
        return job.client if job.reply else None

    def done(self, identity: bytes, msgid: str, status: str, payload: str, now: float) -> None:
        """DONE: the slot is free again; what happens to the job depends on ``status``."""
        worker = self.routing.workers.get(identity)
        # Not in flight: it may wait (after a restart, on disk only). Taken out
        # first, or the slot this DONE frees could be handed it again.
        waited = (
            None
            if msgid in self.routing.inflight
            else self._reported_waiting(msgid, f"DONE {status}")
        )
        if worker is not None:
            job, nxt = self.routing.done(identity, msgid, now)
            if nxt is not None:
                self.book.hand_out(worker, nxt, now)
            if self._aside:
                self.book.settle()
        else:
            job = self.routing.release_from(identity, msgid)
        if job is None:
            job = waited
            if job is None:
                self._stale(identity, msgid, f"DONE {status}")
                return
        job_debug(log, "DONE %s from %s", msgid, job.queue, status, show(identity))
        if status == JobStatus.DIED:
            died = payload_error(payload, "no reason given")[:200]
            self.outcomes.died(job, f"its worker process died ({died})", identity)
        elif status == JobStatus.CANCELLED and self._taken(
            self._stages.cancel_reported, job, payload
        ):
            pass  # a feature finished it (one held past its expiry, not started)
        elif status == JobStatus.RETRY and self._taken(self._stages.retry_asked, job, payload):
            pass  # it waits for its next attempt
        else:
            self.routing.count_finished(job, identity)
            # A retry past its retry-count is a failure; time from hand-out to report.
            outcome = JobStatus.FAILED if status == JobStatus.RETRY else status
            # A job not handed out by this router (waiting since a restart): time unknown.
            ran = now - job.dispatched_at if job.dispatched_at else None
            self.stats.finish(job.queue, outcome, ran)
            if status == JobStatus.REFUSED:
                self.outcomes.refused(job, payload)
            else:
                self.outcomes.finish(job, payload)
        if worker is not None and job.worker is None and self.routing.waiting.get(job.queue):
            self.book.pump(now, [job.queue])

    @staticmethod
    def _taken(hooks: tuple[ReportHook, ...], job: RoutedJob, payload: str) -> bool:
        """A point of :mod:`.stages` for a DONE (``retry_asked``, ``cancel_reported``):
        True if a feature took ``job``."""
        return any(hook(job, payload) for hook in hooks)

    def nack(self, identity: bytes, msgid: str, reason: str, now: float) -> None:
        """NACK: the job was not run; it waits again at once (no death counted).

        Reason ``stopping``: the job manager is shutting down, so it gets no
        more jobs (its free slots vanish); its running jobs stay in flight.
        """
        worker = self.routing.workers.get(identity)
        if worker is not None and reason == NACK_STOPPING and not worker.stopping:
            log.info("worker %s is stopping: no more jobs for it", show(identity))
            self.routing.stop_dispatching(identity)
        if worker is None:
            job = self.routing.release_from(identity, msgid)
        else:
            job, nxt = self.routing.done(identity, msgid, now)
            if nxt is not None:
                self.book.hand_out(worker, nxt, now)
            if self._aside:
                self.book.settle()
        if job is None:
            self._stale(identity, msgid, "NACK")
            return
        job_debug(log, "NACK (%s), waits again", msgid, job.queue, reason)
        self.journal.requeue(job.seq, job.deaths)
        self.routing.requeued += 1
        self.routing.waiting.push(job)
        self.book.pump(now, [job.queue])

    def _stale(self, identity: bytes, msgid: str, report: str) -> None:
        """Say so when a report was not applied because another worker holds the job."""
        holder = self.routing.held_elsewhere(identity, msgid)
        if holder is not None:
            log.info(
                "%s for msgid %s from %s not applied: %s runs it now (handed out again "
                "after its lease ran out there)",
                report,
                msgid,
                show(identity),
                show(holder),
            )

    def _reported_waiting(self, msgid: str, report: str) -> RoutedJob | None:
        """A report (DONE, REPLY) for a job not in flight: if it waits (requeued
        meanwhile, or recovered as waiting after a restart or a failover, in
        memory or on disk only), it did run: taken out and returned. None if it
        is not held (finished already), or the journal cannot be read now (then
        it stays, and may run again)."""
        try:
            job = self.take_waiting(msgid)
        except JournalUnavailable as exc:
            log.warning(
                "%s for msgid %s not applied: journal: %s; the job waits and may run again",
                report,
                msgid,
                exc.reason,
            )
            return None
        if job is None:
            log.debug("%s for msgid %s: not held (already finished)", report, msgid)
        return job

    def take_waiting(self, msgid: str, now: float = 0.0) -> RoutedJob | None:
        """Take the waiting job ``msgid`` out of its queue (in memory, or on disk only:
        a journal read); None if it does not wait. :class:`JournalUnavailable` if
        the journal cannot be read now."""
        waiting = self.routing.waiting
        job = waiting.index.get(msgid)
        if job is not None:
            waiting.queue(job.queue).discard(job)
            # A copy: the one discarded stays in the queue's heap until popped,
            # skipped there; this one may wait again (its job manager lost).
            return dataclasses.replace(job, gone=False)
        if msgid in self.finished or waiting.total() <= waiting.memory():
            return None  # nothing waits on disk only
        journal = self.journal
        found = journal.find(msgid)
        if found is None:
            for seq in journal.parcels_holding(msgid):
                self.book.open_parcel(seq)
            found = journal.find(msgid)
        if found is None or found[0] != WAITING:
            return None
        row = found[1]
        waiting.queue(row.queue).forget_on_disk()
        # No longer WAITING for a queue's next load from disk; the caller gives
        # it its next state (finished, delayed, waiting again).
        journal.set_state(row.seq, LEASED)
        return job_from_row(row, now)

    # -- jobs a job manager holds (after a failover or a reconnect) ---------------------
    def adopt(self, identity: bytes, msgids: Iterable[str], now: float) -> int:
        """The job manager ``identity`` said (FEATURES ``holding``) it holds these jobs:
        those that wait here (recovered as waiting by a restart or a failover) stay
        in flight on it, their lease starting ``now``, and are not handed to
        another. Those in flight on another identity move to it: most likely its own
        before it reconnected (a new socket is a new identity), whose timeout would
        count a death and hand them out again while they run here. Others are
        ignored: unknown or finished. Returns how many it keeps."""
        if identity not in self.routing.workers:
            return 0
        kept: list[str] = []
        for msgid in msgids:
            running = self.routing.inflight.get(msgid)
            if running is not None:
                if running.worker != identity:
                    log.info(
                        "worker %s holds msgid %s, in flight on %s: moved to it",
                        show(identity),
                        msgid,
                        show(running.worker or b""),
                    )
                    self.routing.release(running)
                    self.routing.adopt(identity, running, now)
                    self.book.lease(running, now)
                    kept.append(msgid)
                continue
            try:
                job = self.take_waiting(msgid, now)
            except JournalUnavailable as exc:
                log.warning(
                    "worker %s holds jobs not looked up: journal: %s; they may run again",
                    show(identity),
                    exc.reason,
                )
                break
            if job is None:
                log.debug(
                    "worker %s holds msgid %s, not waiting here: ignored", show(identity), msgid
                )
                continue
            self.routing.adopt(identity, job, now)
            self.book.lease(job, now)
            self.journal.set_state(job.seq, LEASED)  # a copy from memory was WAITING
            kept.append(msgid)
        if kept:
            self.adopted += len(kept)
            log.info(
                "worker %s still holds %d job(s) handed out before: kept in flight on it "
                "(msgids %s)",
                show(identity),
                len(kept),
                ", ".join(kept[:20]),
            )
        return len(kept)
