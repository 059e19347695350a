"""What becomes of a job the router holds: its worker went away or its lease ran
out (it waits again, or is set aside: :mod:`.poisoned`), it is finished,
refused or cancelled. Retries are :mod:`.retries`, expiry :mod:`.expiry`.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING

from django_eventmq.protocol import Reply, new_msgid
from django_eventmq.protocol.extensions import Reject, refusal_reason
from django_eventmq.protocol.status import JobStatus
from django_eventmq.router.journal.store import (
    DELAYED,
    LEASED,
    POISONED,
    WAITING,
    JournalUnavailable,
)
from django_eventmq.router.routing import RoutedJob
from django_eventmq.router.stored import job_from_row
from django_eventmq.runtime.logs import job_debug
from django_eventmq.runtime.outbox import show

if TYPE_CHECKING:
    from django_eventmq.router.book import Book

log = logging.getLogger("django_eventmq.router")

#: The reply a client that asked for one gets for a job cancelled before it ran.
CANCELLED_PAYLOAD = (
    '{"value": null, "error": {"type": "Cancelled", "message": "cancelled before it ran",'
    ' "traceback": ""}}'
)


class Outcomes:
    """A job's ends and losses, and the counts of them."""

    def __init__(self, book: Book) -> None:
        """``book``: the book this is part of (its journal, routing, senders)."""
        self.book = book
        self.settings = book.settings
        self.journal = book.journal
        self.routing = book.routing
        self.stats = book.stats
        self.finished = book.finished
        self.unique = book.unique
        self.stages = book.stages
        self.delays = book.delays
        self.poisoned = book.poisoned
        #: Leases that ran out, in all and per queue.
        self.expired = 0
        self.expired_by_queue: Counter[str] = Counter()

    # -- workers that go away -----------------------------------------------------------
    def worker_failed(self, identity: bytes, why: str) -> None:
        """A worker is dead or unreachable: its jobs are handed out again."""
        jobs = self.routing.remove_worker(identity)
        for job in jobs:
            self.died(job, f"its job manager {why}")
        if jobs:
            log.warning(
                "worker %s dropped (%s): %d in-flight job(s) handed out again (msgids %s)",
                show(identity),
                why,
                len(jobs),
                ", ".join(job.msgid for job in jobs[:20]),
            )
        else:
            log.warning("worker %s dropped (%s)", show(identity), why)

    def worker_left(self, identity: bytes, now: float) -> None:
        """A worker said KBAI: it finishes its jobs; they are handed out again if it
        has not reported them within ``shutdown_grace + lease_grace``."""
        grace = now + self.settings.shutdown_grace + self.settings.lease_grace
        for job in self.routing.remove_worker(identity):
            job.lease_until = min(job.lease_until, grace)

    def expire_leases(self, now: float) -> None:
        for job in [j for j in self.routing.inflight.values() if j.lease_until <= now]:
            self.expired += 1
            self.expired_by_queue[job.queue] += 1
            self.routing.release(job)
            self.died(job, "its lease ran out")

    # -- outcomes ----------------------------------------------------------------------
    def died(self, job: RoutedJob, why: str, reporter: bytes | None = None) -> None:
        """``job`` was lost (``why``): it waits again, or is set aside as poisoned
        (:mod:`.poisoned`). ``reporter``: the job manager that saw its worker process
        die."""
        job_debug(log, "waits again (%s)", job.msgid, job.queue, why)
        job.deaths += 1
        self.routing.release(job)
        for hook in self.stages.lost:  # one may set it aside
            if hook(job, why, reporter):
                return
        self.journal.requeue(job.seq, job.deaths)
        self.routing.requeued += 1
        self.routing.waiting.push(job)

    def finish(self, job: RoutedJob, payload: str | None, *, committed: bool = False) -> None:
        """``committed``: the client's answer waits for the commit holding the removal."""
        self.forget_finished(job)
        if job.reply and job.client and payload is not None:
            send = self.book.after_commit if committed else self.book.to_client
            send(job.client, Reply(msgid=new_msgid(), payload=payload, reply_to=job.msgid))

    def refused(self, job: RoutedJob, payload: str) -> None:
        """A job manager refused the job (not registered, not allowed, bad body): the
        client that asked gets REJECT with the reason, not a REPLY."""
        self.forget_finished(job)
        if job.reply and job.client:
            reject = Reject(msgid=new_msgid(), job_msgid=job.msgid, reason=refusal_reason(payload))
            self.book.to_client(job.client, reject)

    def forget_finished(self, job: RoutedJob) -> None:
        self.journal.delete(job.seq)
        self.finished.add(job.msgid)
        for hook in self.stages.finished:
            hook(job)

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
                        self.book.open_parcel(seq)
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
                self.delays.delayed[row.queue] -= 1
                self.book.rate_limits.unparked(row.queue, row.headers)
            elif state == POISONED:
                self.poisoned.by_queue[row.queue] -= 1
        self.stats.finish(job.queue, JobStatus.CANCELLED)
        self.finish(job, CANCELLED_PAYLOAD, committed=True)  # "never runs": once stored
        job_debug(log, "cancelled before it ran", msgid, job.queue)
        return None
