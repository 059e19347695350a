"""The retry decisions the router makes: a job whose job manager reported DONE
``retry`` waits (DELAYED in the journal) and is handed out again, until it
used its ``retry-count``; then it is a failure.

The pause is the job's retry policy, as its job manager said (``retry_in`` in
the DONE's payload: :func:`~django_eventmq.runtime.retry_policy.delay_in_payload`),
else this router's back-off (``RETRY_BACKOFF_BASE``, ``RETRY_BACKOFF_CAP``).
The retried job is handed out with an ``attempt:K`` header (see :mod:`.book`,
"Attempts").
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from django_eventmq.runtime import retry_policy
from django_eventmq.runtime.logs import job_debug
from django_eventmq.runtime.retry import backoff

if TYPE_CHECKING:
    from django_eventmq.router.book import Book
    from django_eventmq.router.waiting import RoutedJob

log = logging.getLogger("django_eventmq.router")


class Retries:
    """The book's retried jobs."""

    def __init__(self, book: Book) -> None:
        """``book``: the book this is part of (its settings, stats, delays, stages)."""
        self.book = book
        self.settings = book.settings

    def take(self, job: RoutedJob, payload: str) -> bool:
        """DONE ``retry`` for ``job`` (``payload``: its DONE's): retried unless it used
        its ``retry-count`` (False: it failed)."""
        if job.attempts >= job.retry_count:
            return False
        self.retry(job, retry_policy.delay_in_payload(payload))
        return True

    #: The ``retry_asked`` point (:mod:`.stages`).
    on_retry_asked = take

    def retry(self, job: RoutedJob, asked: float | None = None) -> None:
        """Hold ``job`` (in the journal, DELAYED) for ``asked`` seconds (the job's retry
        policy, as its job manager said), else this router's back-off."""
        s = self.settings
        book = self.book
        job.attempts += 1
        book.stats.retried[job.queue] += 1
        pause = backoff(job.attempts, s.retry_backoff_base, s.retry_backoff_cap)
        if asked is not None:
            pause = asked
        book.delays.delay(job, time.time() + pause)
        for hook in book.stages.retrying:
            hook(job)
        n, of = job.attempts, job.retry_count
        job_debug(log, "retry %d of %d in %.1fs", job.msgid, job.queue, n, of, pause)
