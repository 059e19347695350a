"""Poisoned jobs (dead letters): a job whose worker died ``poison_after`` times is
set aside (POISONED in the journal) instead of handed out again; its client
gets REJECT, the job manager that reported the last death too (if it
announced ``poisoned``: it records the job's end, the router having no
database), and admin STATUS / MONITOR list it. The admin's POISONED_RETRY
makes such jobs wait again (their deaths forgotten), POISONED_PURGE deletes
them.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from django_eventmq.protocol import new_msgid
from django_eventmq.protocol.extensions import Reject
from django_eventmq.router.journal.store import POISONED, Row
from django_eventmq.router.stored import job_from_row
from django_eventmq.runtime.logs import job_fields

if TYPE_CHECKING:
    from django_eventmq.router.book import Book
    from django_eventmq.router.waiting import RoutedJob

log = logging.getLogger("django_eventmq.router")


class PoisonedJobs:
    """The book's poisoned jobs: set aside, counted, retried or purged."""

    def __init__(self, book: Book) -> None:
        """``book``: the book this is part of (its journal, stages, senders)."""
        self.book = book
        self.journal = book.journal
        #: Jobs set aside per queue (POISONED in the journal).
        self.by_queue: Counter[str] = Counter()

    def set_aside(self, job: RoutedJob, why: str, reporter: bytes | None) -> bool:
        """Set ``job``, lost (``why``) once more, aside if it died ``poison_after``
        times; False: it may wait again. ``reporter``: the job manager that saw its
        worker process die."""
        book = self.book
        if job.deaths < book.settings.poison_after:
            return False
        reason = f"poisoned: {why}, {job.deaths} time(s)"
        self.journal.poison(job.seq, job.deaths, reason)
        for hook in book.stages.set_aside:
            hook(job)
        self.by_queue[job.queue] += 1
        log.warning(
            "job set aside msgid=%s queue=%s: %s",
            job.msgid,
            job.queue,
            reason,
            extra=job_fields(job.msgid, job.queue),
        )
        if job.client:  # once the journal holds it poisoned
            book.after_commit(
                job.client, Reject(msgid=new_msgid(), job_msgid=job.msgid, reason=reason)
            )
        tell = book.set_aside
        if reporter is not None and tell is not None:
            tell(reporter, job.msgid, reason)  # it records the job's end
        return True

    #: The ``lost`` point (:mod:`.stages`).
    on_lost = set_aside

    # -- admin POISONED_RETRY / POISONED_PURGE ------------------------------------------
    def _take(self, msgids: Iterable[str]) -> list[Row]:
        """The rows of those of ``msgids`` poisoned here, no longer counted as poisoned."""
        rows = []
        for msgid in msgids:
            found = self.journal.find(msgid)
            if found is not None and found[0] == POISONED:
                self.by_queue[found[1].queue] -= 1
                rows.append(found[1])
        return rows

    def retry(self, msgids: Iterable[str], now: float) -> list[str]:
        """Poisoned jobs wait again with their deaths forgotten; the msgids that were
        poisoned here (others are not touched)."""
        rows = self._take(msgids)
        # They hold their unique keys again (freed when they were set aside).
        self.book.unique.rebuild((row.msgid, row.headers, row.accepted) for row in rows)
        for row in rows:
            self.journal.unpoison(row.seq)
            job = job_from_row(row, now)
            job.deaths = 0
            self.book.routing.waiting.push(job)
            log.info("poisoned job msgid=%s queue=%s waits again (admin)", row.msgid, row.queue)
        self.book.pump(now, sorted({row.queue for row in rows}))
        return [row.msgid for row in rows]

    def purge(self, msgids: Iterable[str]) -> list[str]:
        """Poisoned jobs deleted from the journal; the msgids that were poisoned here."""
        rows = self._take(msgids)
        for row in rows:
            self.journal.delete(row.seq)
            log.info("poisoned job msgid=%s queue=%s purged (admin)", row.msgid, row.queue)
        return [row.msgid for row in rows]
