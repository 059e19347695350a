"""Expiry in the router: a job with an ``expires`` header is never handed out after
that time (the router's wall clock; the client computed it from its own, so the
two are assumed roughly in sync).

A pop from a wait queue skips such a job (:class:`Expiry`), a new job that
arrives expired is not stored, and a job manager reports one it held too long
as DONE ``cancelled`` with an ``Expired`` error
(:func:`~django_eventmq.protocol.status.expired_reply`); each is finished
(deleted from the journal, its msgid remembered), counted per queue
(:attr:`ExpiredJobs.by_queue`, MONITOR ``jobs_expired``; and as ``cancelled``
in the finished-jobs stats, whose words are the DONE's), and its client, if it
asked for a reply, gets an ``Expired`` error reply.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import Reply, new_msgid
from django_eventmq.protocol.frame_fields import stored_request
from django_eventmq.protocol.headers import expires_of
from django_eventmq.protocol.status import EXPIRED_ERROR, JobStatus, expired_reply
from django_eventmq.runtime.logs import job_debug

if TYPE_CHECKING:
    from django_eventmq.router.book import Book
    from django_eventmq.router.waiting import RoutedJob

log = logging.getLogger("django_eventmq.router")

#: The reply a client that asked for one gets for a job that expired before it started.
EXPIRED_PAYLOAD = (
    f'{{"value": null, "error": {{"type": "{EXPIRED_ERROR}", "message": "not started before'
    ' its expiry; it never ran", "traceback": ""}}'
)


def expires_at(job: RoutedJob) -> float:
    """``job.expires``, read from its header frame the first time (a job rebuilt from
    the journal does not carry it); inf when it has none."""
    at = job.expires
    if at != at:  # nan: not read yet
        try:
            found = expires_of(stored_request(job.frames).headers)
        except ProtocolError:
            found = None
        at = job.expires = math.inf if found is None else found
    return at


class Expiry:
    """Jobs a pop skipped because their ``expires`` time passed, and the clock it asks."""

    __slots__ = ("clock", "expired")

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.expired: list[RoutedJob] = []

    def passed(self, job: RoutedJob) -> bool:
        """True (and ``job`` kept in :attr:`expired`) if it may no longer be handed out."""
        at = expires_at(job)
        if at == math.inf or at > self.clock():
            return False
        self.expired.append(job)
        return True


class ExpiredJobs:
    """The book's expired jobs: finished, counted, their clients told."""

    def __init__(self, book: Book) -> None:
        """``book``: the book this is part of (its stats, senders, outcomes)."""
        self.book = book
        #: Jobs a pop skipped (the wait queues' :class:`Expiry`).
        self.skipped = book.routing.waiting.expiry.expired
        #: Jobs not started before their ``expires`` time (never run), per queue.
        self.by_queue: Counter[str] = Counter()

    def settle(self) -> None:
        """Finish the jobs a wait queue skipped because their ``expires`` time passed."""
        skipped = self.skipped
        while skipped:
            self.expired(skipped.pop(0))

    #: The ``settling`` point (:mod:`.stages`).
    on_settling = settle

    def expired(self, job: RoutedJob, *, stored: bool = True) -> None:
        """``job`` was not started before its expiry: finished, never run."""
        book = self.book
        self.by_queue[job.queue] += 1
        book.stats.finish(job.queue, JobStatus.CANCELLED)  # the DONE words
        job_debug(log, "expired before it started, not run", job.msgid, job.queue)
        if stored:
            book.outcomes.forget_finished(job)
        else:
            book.finished.add(job.msgid)
        if job.reply and job.client:
            book.to_client(
                job.client, Reply(msgid=new_msgid(), payload=EXPIRED_PAYLOAD, reply_to=job.msgid)
            )

    def on_cancel_reported(self, job: RoutedJob, payload: str) -> bool:
        """The ``cancel_reported`` point (:mod:`.stages`): True if the DONE
        ``cancelled`` says the job was held past its expiry (then finished here)."""
        if not expired_reply(payload):
            return False
        self.reported(job, payload)
        return True

    def reported(self, job: RoutedJob, payload: str) -> None:
        """A job manager held ``job`` past its expiry and did not start it (its DONE
        ``cancelled`` says so, ``payload``)."""
        self.by_queue[job.queue] += 1
        self.book.stats.finish(job.queue, JobStatus.CANCELLED)  # the DONE words
        self.book.outcomes.finish(job, payload)
