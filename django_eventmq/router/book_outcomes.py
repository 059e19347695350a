"""What becomes of a job handed out: its worker went away or its lease ran out
(it waits again, or is set aside as poisoned), it is retried later, finished,
or refused.

A mixin of :class:`.book.Book` (the state it uses belongs to the book).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import TYPE_CHECKING

from django_eventmq.protocol import Reply, new_msgid
from django_eventmq.protocol.extensions import Reject, refusal_reason
from django_eventmq.router.dedup import FinishedWindow
from django_eventmq.router.journal.api import JournalLike
from django_eventmq.router.routing import RoutedJob, Routing
from django_eventmq.router.unique import UniqueKeys
from django_eventmq.runtime.logs import job_debug, job_fields
from django_eventmq.runtime.outbox import show
from django_eventmq.runtime.retry import backoff
from django_eventmq.runtime.settings import Settings
from django_eventmq.runtime.stats import Stats

if TYPE_CHECKING:
    from django_eventmq.router.book import SetAside, ToClient

log = logging.getLogger("django_eventmq.router")


class BookOutcomes:
    """Lost, retried and finished jobs (mixed into the book)."""

    settings: Settings
    journal: JournalLike
    to_client: ToClient
    after_commit: ToClient
    routing: Routing
    stats: Stats
    finished: FinishedWindow
    unique: UniqueKeys
    delayed: Counter[str]
    poisoned: Counter[str]
    set_aside: SetAside | None
    expired: int
    expired_by_queue: Counter[str]
    _next_due: float | None

    # -- workers that go away -----------------------------------------------------------
    def worker_failed(self, identity: bytes, why: str) -> None:
        """A worker is dead or unreachable: its jobs are handed out again."""
        jobs = self.routing.remove_worker(identity)
        for job in jobs:
            self._died(job, f"its job manager {why}")
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
            self._died(job, "its lease ran out")

    # -- outcomes ----------------------------------------------------------------------
    def _died(self, job: RoutedJob, why: str, reporter: bytes | None = None) -> None:
        """``job`` was lost (``why``): it waits again, or is set aside as poisoned.
        ``reporter``: the job manager that saw its worker process die."""
        job_debug(log, "waits again (%s)", job.msgid, job.queue, why)
        job.deaths += 1
        self.routing.release(job)
        if job.deaths >= self.settings.poison_after:
            reason = f"poisoned: {why}, {job.deaths} time(s)"
            self.journal.poison(job.seq, job.deaths, reason)
            self.unique.release(job.msgid)
            self.poisoned[job.queue] += 1
            log.warning(
                "job set aside msgid=%s queue=%s: %s",
                job.msgid,
                job.queue,
                reason,
                extra=job_fields(job.msgid, job.queue),
            )
            if job.client:  # once the journal holds it poisoned
                self.after_commit(
                    job.client, Reject(msgid=new_msgid(), job_msgid=job.msgid, reason=reason)
                )
            if reporter is not None and self.set_aside is not None:
                self.set_aside(reporter, job.msgid, reason)  # it records the job's end
            return
        self.journal.requeue(job.seq, job.deaths)
        self.routing.requeued += 1
        self.routing.waiting.push(job)

    def _retry(self, job: RoutedJob, asked: float | None = None) -> None:
        """Hold ``job`` (in the journal, DELAYED) for ``asked`` seconds (the job's retry
        policy, as its job manager said), else this router's back-off."""
        s = self.settings
        job.attempts += 1
        self.stats.retried[job.queue] += 1
        pause = backoff(job.attempts, s.retry_backoff_base, s.retry_backoff_cap)
        if asked is not None:
            pause = asked
        due = time.time() + pause
        self.journal.delay(job.seq, due, job.attempts)
        self.delayed[job.queue] += 1
        if self._next_due is None or due < self._next_due:
            self._next_due = due
        n, of = job.attempts, job.retry_count
        job_debug(log, "retry %d of %d in %.1fs", job.msgid, job.queue, n, of, pause)

    def _finish(self, job: RoutedJob, payload: str | None, *, committed: bool = False) -> None:
        """``committed``: the client's answer waits for the commit holding the removal."""
        self._forget_finished(job)
        if job.reply and job.client and payload is not None:
            send = self.after_commit if committed else self.to_client
            send(job.client, Reply(msgid=new_msgid(), payload=payload, reply_to=job.msgid))

    def _refused(self, job: RoutedJob, payload: str) -> None:
        """A job manager refused the job (not registered, not allowed, bad body): the
        client that asked gets REJECT with the reason, not a REPLY."""
        self._forget_finished(job)
        if job.reply and job.client:
            reject = Reject(msgid=new_msgid(), job_msgid=job.msgid, reason=refusal_reason(payload))
            self.to_client(job.client, reject)

    def _forget_finished(self, job: RoutedJob) -> None:
        self.journal.delete(job.seq)
        self.finished.add(job.msgid)
        self.unique.release(job.msgid)
