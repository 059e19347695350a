"""A job's life in the router: accepted, stored, handed out, finished or handed out again.

:class:`Book` joins the routing state (:mod:`.routing`) and the journal
(:mod:`.journal`). It sends nothing itself: it calls ``deliver(worker, job)``
to hand a job to a worker (the router sends it by the end of its loop
iteration, or calls :meth:`Book.undo` if it cannot) and
``to_client(identity, message)`` for what it tells clients (replies, REJECTs),
and ``after_commit(identity, message)`` for what must wait for the journal
commit holding the change it tells of (a cancelled job's answer, a poisoned
job's REJECT: a crash before that commit would run the job again). Its parts are mixins:
:mod:`.book_reports` (what job managers report), :mod:`.book_outcomes` (what
becomes of a job handed out) and :mod:`.book_held` (delayed, parked,
cancelled and poisoned jobs).

Promises (README "Nothing lost"):

- A job is in the journal before its ACK is sent, and stays there until a
  job manager reports it finished (DONE, a REPLY naming it, or the READY
  approximation for job managers that do not send DONE).
- A job handed out is handed out again when its job manager goes silent,
  leaves without reporting it, answers NACK, its lease runs out, or the
  router restarts: delivery is at-least-once for every accepted job.
- A job whose worker died ``poison_after`` times is set aside (POISONED),
  the client gets REJECT, and admin STATUS / MONITOR list it. The job
  manager that reported the last death gets REJECT too (if it announced
  ``poisoned``): it records the job's end, the router having no database.
- A REQUEST whose msgid is held, or finished recently (``dedup_memory``
  msgids, ``dedup_window`` seconds; kept in the journal, so across a
  restart too), is acknowledged again and not run twice.

Expiry: a job with an ``expires`` header is never handed out after that
time (the router's wall clock; the client computed it from its own, so the
two are assumed roughly in sync). A pop from a wait queue skips it
(:class:`.waiting.Expiry`), a new job that arrives expired is not stored, and
a job manager reports one it held too long as DONE ``cancelled`` with an
``Expired`` error (:func:`~django_eventmq.protocol.status.expired_reply`); each is
finished (deleted from the journal, its msgid remembered), counted per queue
in :attr:`Book.jobs_expired` (and as ``cancelled`` in the finished-jobs stats,
whose words are the DONE's), and its client, if it asked for a reply, gets
an ``Expired`` error reply.

Attempts: a job retried after DONE status ``retry`` is handed out with an
``attempt:K`` header (K = 2 for the first retry; any ``attempt:N`` it had is
replaced) so the job manager records and counts the right attempt. A job
handed out again after a loss (worker died or silent, lease ran out, NACK,
router restart) keeps the attempt it had: that run's outcome is unknown, not
a failure, and deaths are counted apart (``poison_after``).
"""

from __future__ import annotations

import itertools
import logging
import math
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from django_eventmq.protocol import Message, Reply, new_msgid
from django_eventmq.protocol.extensions import Reject
from django_eventmq.protocol.headers import Headers
from django_eventmq.protocol.status import EXPIRED_ERROR, JobStatus
from django_eventmq.protocol.views import stored_request
from django_eventmq.router.book_held import CANCELLED_PAYLOAD as CANCELLED_PAYLOAD
from django_eventmq.router.book_held import BookHeld
from django_eventmq.router.book_reports import BookReports
from django_eventmq.router.dedup import FinishedWindow, StoredMsgids
from django_eventmq.router.journal.api import JournalLike
from django_eventmq.router.journal.store import (
    DELAYED,
    LEASED,
    POISONED,
    WAITING,
    JournalUnavailable,
    new_row,
    parcel_digest,
)
from django_eventmq.router.rate_limits import RateLimits, queue_rates
from django_eventmq.router.routing import JobManagerPeer, RoutedJob, Routing
from django_eventmq.router.stored import jobs_from_rows
from django_eventmq.router.unique import UniqueKeys
from django_eventmq.router.waiting import Key
from django_eventmq.runtime.logs import job_debug
from django_eventmq.runtime.outbox import show
from django_eventmq.runtime.settings import Settings
from django_eventmq.runtime.stats import Stats

log = logging.getLogger("django_eventmq.router")

#: The reply a client that asked for one gets for a job that expired before it started.
EXPIRED_PAYLOAD = (
    f'{{"value": null, "error": {{"type": "{EXPIRED_ERROR}", "message": "not started before'
    ' its expiry; it never ran", "traceback": ""}}'
)

Deliver = Callable[[JobManagerPeer, RoutedJob], None]
ToClient = Callable[[bytes, Message], None]
#: Tells the job manager ``identity`` that the job ``msgid`` whose death it reported is
#: set aside (``reason``), once the journal holds that (``Router._tell_set_aside``).
SetAside = Callable[[bytes, str, str], None]
#: A REQUEST to accept: its frames (as a DEALER sent them), msgid, queue and headers.
Accepting = tuple[list[bytes], str, str, Headers]


def job_values(
    job: RoutedJob, state: int, accepted: float, due: float | None, owner: str | None = None
) -> list[Any]:
    """A new job's journal row (see :meth:`.store.Journal.add`); ``owner``: the
    CURVE key that sent it (CANCEL_POLICY ``owner``)."""
    request = stored_request(job.frames)
    return new_row(
        job.seq,
        job.msgid,
        job.queue,
        job.priority,
        state,
        job.guarantee,
        request.headers,
        request.body,
        job.client,
        accepted,
        due or 0.0,
        owner,
    )


class Book(BookReports, BookHeld):
    """Every job the router holds, in memory (bounded) and in the journal."""

    def __init__(
        self,
        settings: Settings,
        journal: JournalLike,
        deliver: Deliver,
        to_client: ToClient,
        after_commit: ToClient | None = None,
        set_aside: SetAside | None = None,
    ) -> None:
        """``after_commit``: sends what tells a client of a change the journal must
        hold first (by default ``to_client``: a book alone, in tests); ``set_aside``:
        tells a job manager that a job whose death it reported is poisoned."""
        self.settings = settings
        self.journal = journal
        self.deliver = deliver
        self.to_client = to_client
        self.after_commit = after_commit or to_client
        self.set_aside = set_aside
        self.routing = Routing(settings.queue_window, self._load)
        #: Rate limits per queue (RATE_LIMITS) and per rate key (headers); docs/rate-limits.md.
        self.rate_limits = RateLimits(queue_rates(settings.rate_limits))
        self.routing.waiting.limits = self.rate_limits
        self.delayed: Counter[str] = Counter()
        self.poisoned: Counter[str] = Counter()
        self.expired = 0
        self.duplicates = 0
        self.rejected = 0
        self.recovered = 0
        #: Waiting jobs kept in flight on the job manager that said it holds them.
        self.adopted = 0
        #: Jobs received, handed out, finished, retried; read by admin STATUS and metrics.
        self.stats = Stats()
        #: msgids finished recently (kept in the journal too): a resend is not run again.
        self.finished = FinishedWindow(journal, settings.dedup_memory, settings.dedup_window)
        #: msgids that may be in a job row (no lookup for the others; see :meth:`accept`).
        self.stored_msgids = StoredMsgids()
        #: Leases that ran out, per queue.
        self.expired_by_queue: Counter[str] = Counter()
        #: Jobs not started before their ``expires`` time (never run), per queue.
        self.jobs_expired: Counter[str] = Counter()
        self._expiry = self.routing.waiting.expiry
        #: Unique jobs' keys and who holds them (:mod:`.unique`).
        self.unique = UniqueKeys()
        self._seq = 0
        self._next_due: float | None = None
        self._last_digest: tuple[bytes, bytes] | None = None

    # -- start-up ----------------------------------------------------------------
    def recover(self) -> None:
        """Load the journal's counts; jobs handed out before a restart wait again."""
        journal = self.journal
        self.recovered = journal.recover()
        counts = journal.counts()
        for queue, n in counts[WAITING].items():
            wait_queue = self.routing.waiting.queue(queue)
            wait_queue.count = n
            wait_queue.spill_all()
        self.delayed = counts[DELAYED]
        self.poisoned = counts[POISONED]
        self._seq = journal.max_seq()
        self._next_due = journal.next_due()
        # Unique jobs' keys: those of held jobs, before anyone is answered.
        if keys := self.unique.rebuild(journal.unique_rows()):
            log.info("unique keys read back: %d held by jobs in the journal", keys)
        if self.finished.load():
            log.info(
                "journal %s: %d recently finished msgid(s) will not run again if resent",
                journal.path,
                len(self.finished),
            )
        held = sum(counts[WAITING].values()) + sum(self.delayed.values())
        if held or self.poisoned:
            log.warning(
                "journal %s: %d job(s) waiting (%d of them had been handed out and are handed "
                "out again), %d delayed, %d poisoned",
                journal.path,
                sum(counts[WAITING].values()),
                self.recovered,
                sum(self.delayed.values()),
                sum(self.poisoned.values()),
            )

    def _load(self, queue: str, after: Key | None, limit: int) -> list[RoutedJob] | None:
        """The next ``limit`` waiting jobs of ``queue`` on disk after ``after``,
        opening the parcels that hold any of them (see :meth:`accept_parcel`).
        None while the journal cannot be written: a read would miss what it keeps."""
        journal = self.journal
        try:
            rows = journal.waiting(queue, after, limit)
            while True:
                # Parcels whose first job comes before the last row read hold jobs
                # that come first; one parcel at a time, so a long queue of parcels
                # is not all opened at once.
                upto = (rows[-1].nprio, rows[-1].seq) if len(rows) == limit else None
                seq = journal.next_parcel(queue, upto)
                if seq is None:
                    break
                self._open_parcel(seq)
                rows = journal.waiting(queue, after, limit)
        except JournalUnavailable:
            return None
        return jobs_from_rows(rows, time.monotonic())

    def _open_parcel(self, seq: int) -> None:
        queue, dropped = self.journal.open_parcel(seq, self.finished)
        self.stored_msgids.full = True  # rows whose msgids the book did not see
        if dropped:
            # Held already or finished recently: counted as waiting, never stored.
            self.duplicates += dropped
            self.routing.waiting.queue(queue).forget_on_disk(dropped)

    # -- accepting ---------------------------------------------------------------
    @property
    def last_seq(self) -> int:
        """The seq of the newest job accepted (every job up to it is stored once the
        journal commit that follows returned)."""
        return self._seq

    def backlog(self) -> int:
        """Jobs accepted and not handed out (waiting + delayed)."""
        return self.routing.waiting.total() + sum(self.delayed.values())

    def is_held(self, msgid: str) -> bool:
        """Known without a disk read: in memory, or finished recently."""
        return (
            msgid in self.finished
            or msgid in self.routing.inflight
            or msgid in self.routing.waiting.index
        )

    def stored_while_failing(self, msgid: str) -> bool:
        """While the journal cannot be written: True if ``msgid`` is a job stored on
        disk only (:meth:`is_held` cannot see it), so that its resend is a duplicate,
        not refused. A read of committed rows, which a failing journal still answers."""
        if self.journal.failure is None or not self._some_only_on_disk():
            return False
        try:
            return self.journal.holds_row(msgid)
        except sqlite3.Error:
            return False  # unreadable too: refused, and it comes again

    def _some_only_on_disk(self) -> bool:
        """True if jobs are held that :meth:`is_held` cannot see: waiting jobs past
        the in-memory window, delayed and poisoned ones."""
        return (
            self.routing.waiting.some_on_disk()
            or any(self.delayed.values())
            or any(self.poisoned.values())
        )

    def _may_be_stored(self, msgid: str) -> bool:
        """True if a job row may have ``msgid`` though :meth:`is_held` said no: some
        held jobs are on disk only and :attr:`stored_msgids` does not rule it out.

        While every held job is in memory (and nothing is kept unwritten, such
        as a finished job's row not deleted yet), the book knows every row's
        msgid: a stale filter starts again from them there."""
        stored = self.stored_msgids
        if self._some_only_on_disk():
            return stored.may_hold(msgid)
        if stored.stale() and not self.journal.pending:
            stored.restart(self._msgids_in_memory())
        return False

    def _msgids_in_memory(self) -> Iterable[str]:
        """The msgids of the jobs held in memory: waiting, handed out, and those a
        pop has just set aside (parked by a rate limit, expired)."""
        waiting = self.routing.waiting
        return itertools.chain(
            waiting.index,
            self.routing.inflight,
            (job.msgid for job, _ in self.rate_limits.parked),
            (job.msgid for job in waiting.expiry.expired),
        )

    def accept(
        self,
        identity: bytes,
        frames: list[bytes],
        msgid: str,
        queue: str,
        headers: Headers,
        now: float,
        owner: str | None = None,
    ) -> bool:
        """Store and route a REQUEST; False if it is a duplicate (held or recently finished).
        ``owner``: the CURVE key that sent it, kept to check a CANCEL."""
        if self.is_held(msgid) or self.stored_while_failing(msgid):
            self.duplicates += 1
            return False
        job = self._new_job(identity, frames, msgid, queue, headers, now)
        wall = time.time()
        if headers.expires is not None and headers.expires <= wall:
            self.stats.received[queue] += 1
            self._expired(job, stored=False)
            return True
        due = headers.delay_until
        delayed = due is not None and due > wall
        if not headers.extra:
            job.rate = None  # no rate-limit header to look for
        limited = self.rate_limits.limited(job)  # then it goes out through its wait queue
        worker = None if delayed or limited else self.routing.free_worker(queue)
        state = DELAYED if delayed else (LEASED if worker is not None else WAITING)
        stored = self.journal.add(
            job_values(job, state, wall, due if delayed else None, owner),
            on_disk=self._may_be_stored(msgid),
        )
        self.stored_msgids.add(msgid)
        if not stored:
            self.duplicates += 1
            return False
        self.unique.hold(msgid, headers, wall)
        self._route_new(job, due if delayed else None, now, stored_as_leased=state == LEASED)
        return True

    def accept_many(
        self, identity: bytes, requests: list[Accepting], now: float, owner: str | None = None
    ) -> None:
        """:meth:`accept` for the REQUESTs of one BATCH.

        While some held jobs are on disk only, a kept insert cannot see their
        msgids, and an insert at once per job costs twice a grouped one: the
        new jobs are inserted together, and the insert says which were held.
        """
        if not self._some_only_on_disk():
            for frames, msgid, queue, headers in requests:
                self.accept(identity, frames, msgid, queue, headers, now, owner)
            return
        wall = time.time()
        fresh: list[tuple[RoutedJob, float | None]] = []
        seen: set[str] = set()
        for frames, msgid, queue, headers in requests:
            if msgid in seen or self.is_held(msgid):
                self.duplicates += 1
                continue
            seen.add(msgid)
            due = headers.delay_until
            fresh.append(
                (
                    self._new_job(identity, frames, msgid, queue, headers, now),
                    due if due is not None and due > wall else None,
                )
            )
        stored = self.journal.add_many(
            [
                job_values(job, WAITING if due is None else DELAYED, wall, due, owner)
                for job, due in fresh
            ]
        )
        for job, _ in fresh:
            self.stored_msgids.add(job.msgid)
        keyed = {msgid: headers for _, msgid, _, headers in requests if headers.unique_key}
        for job, due in fresh:
            if job.seq in stored:
                if job.msgid in keyed:
                    self.unique.hold(job.msgid, keyed[job.msgid], wall)
                self._route_new(job, due, now)
            else:
                self.duplicates += 1

    def accept_parcel(
        self,
        identity: bytes,
        jobs_frame: bytes,
        count: int,
        queue: str,
        headers: Headers,
        headers_frame: bytes,
        now: float,
        first_last: tuple[str, str] = ("", ""),
    ) -> bool:
        """Store a BATCH's ``count`` jobs, all of ``queue`` with the same ``headers``,
        as one parcel (see :mod:`.journal`); False, and nothing done, unless its
        queue waits on disk already so that its jobs would wait on disk only.
        ``first_last``: the msgids of its first and last job.

        The jobs are not each checked against held or finished msgids here:
        that costs an index entry per job, more than the rest of storing them.
        What a retried Spark task or an export sent again brings is caught
        whole instead, so that it is neither stored nor counted as waiting
        (nor toward the high-water mark): the same JOBS frame as a parcel
        held was answered by :meth:`same_parcel`; a batch whose first or last
        job is held or finished recently goes job by job (False), each
        checked. A duplicate in any other batch is dropped when its parcel is
        opened (:meth:`_load`).
        """
        wait_queue = self.routing.waiting.queue(queue)
        due = headers.delay_until
        if (
            headers.unique_key is not None  # each job takes its key (accept_many)
            or not wait_queue.after_boundary((-headers.priority, self._seq + 1))
            or (due is not None and due > time.time())
            or self.routing.free_worker(queue) is not None
        ):
            return False
        journal = self.journal
        if any(msgid and (self.is_held(msgid) or journal.holds_row(msgid)) for msgid in first_last):
            return False
        seq = self._seq + 1
        self._seq += count
        journal.add_parcel(
            seq,
            count,
            queue,
            headers.priority,
            headers.guarantee,
            headers_frame,
            identity,
            time.time(),
            jobs_frame,
            self._digest(jobs_frame),
        )
        wait_queue.wait_on_disk(count)
        self.stats.received[queue] += count
        return True

    def same_parcel(self, jobs_frame: bytes, count: int) -> bool:
        """True if a parcel not opened yet holds this very JOBS frame (the same
        BATCH sent again): its ``count`` jobs are held, counted as duplicates."""
        if not self.journal.parcel_count() or not self.journal.holds_parcel(
            self._digest(jobs_frame)
        ):
            return False
        self.duplicates += count
        return True

    def _digest(self, jobs_frame: bytes) -> bytes:
        """:func:`.parcels.parcel_digest`, once per frame (asked, then stored)."""
        last = self._last_digest
        if last is not None and last[0] is jobs_frame:
            return last[1]
        digest = parcel_digest(jobs_frame)
        self._last_digest = (jobs_frame, digest)
        return digest

    def _new_job(
        self,
        identity: bytes,
        frames: list[bytes],
        msgid: str,
        queue: str,
        headers: Headers,
        now: float,
    ) -> RoutedJob:
        self._seq += 1
        return RoutedJob(
            msgid,
            queue,
            frames,
            headers.guarantee,
            now,
            seq=self._seq,
            priority=headers.priority,
            client=identity,
            reply=headers.reply_requested,
            retry_count=headers.retry_count,
            timeout=headers.timeout,
            expires=math.inf if headers.expires is None else headers.expires,
        )

    def _route_new(
        self, job: RoutedJob, due: float | None, now: float, *, stored_as_leased: bool = False
    ) -> None:
        """A stored new job: delayed until ``due``, or to a free worker or the waiting queue."""
        queue = job.queue
        self.stats.received[queue] += 1
        if due is not None:
            self.delayed[queue] += 1
            if self._next_due is None or due < self._next_due:
                self._next_due = due
            return
        worker = self.routing.submit(job, now)
        if worker is not None:
            self._hand_out(worker, job, now, stored_as_leased=stored_as_leased)
        elif self._expiry.expired:
            self.settle_expired()
        if self.rate_limits.parked:
            self.settle_parked()

    def reject(self, identity: bytes, msgid: str, reason: str) -> None:
        self.rejected += 1
        self.to_client(identity, Reject(msgid=new_msgid(), job_msgid=msgid, reason=reason))

    # -- handing out ---------------------------------------------------------------
    def _hand_out(
        self, worker: JobManagerPeer, job: RoutedJob, now: float, *, stored_as_leased: bool = False
    ) -> None:
        self.lease(job, now)
        if not stored_as_leased:
            self.journal.set_state(job.seq, LEASED)
        job_debug(log, "handed to %s", job.msgid, job.queue, show(worker.identity))
        self.deliver(worker, job)

    def lease(self, job: RoutedJob, now: float) -> None:
        """Start ``job``'s lease (it runs from ``now``)."""
        s = self.settings
        if job.timeout:
            job.lease_until = now + job.timeout + s.lease_grace
        elif s.job_lease:
            job.lease_until = now + s.job_lease
        else:
            job.lease_until = math.inf

    def still_queued(self, identity: bytes, msgids: Iterable[str], now: float) -> None:
        """QUEUED: the job manager ``identity`` holds these jobs and has not started
        them (prefetched behind others): their leases start again from ``now``, so a
        lease bounds a job's run, not its wait there. A job in flight elsewhere (or
        no longer) is left alone."""
        inflight = self.routing.inflight
        for msgid in msgids:
            job = inflight.get(msgid)
            if job is not None and job.worker == identity and job.lease_until != math.inf:
                self.lease(job, now)

    def pump(self, now: float, queues: list[str] | None = None) -> None:
        """Hand waiting jobs to free workers (sent at the end of the loop iteration)."""
        routing = self.routing
        for queue in queues if queues is not None else list(routing.waiting):
            while (pair := routing.dispatch_waiting(queue, now)) is not None:
                self._hand_out(*pair, now)
        if self._expiry.expired:
            self.settle_expired()
        if self.rate_limits.parked:
            self.settle_parked()

    def settle_expired(self) -> None:
        """Finish the jobs a wait queue skipped because their ``expires`` time passed."""
        dropped = self._expiry.expired
        while dropped:
            self._expired(dropped.pop(0))

    def _expired(self, job: RoutedJob, *, stored: bool = True) -> None:
        """``job`` was not started before its expiry: finished, never run."""
        self.jobs_expired[job.queue] += 1
        self.stats.finish(job.queue, JobStatus.CANCELLED)  # the DONE words
        job_debug(log, "expired before it started, not run", job.msgid, job.queue)
        if stored:
            self._forget_finished(job)
        else:
            self.finished.add(job.msgid)
        if job.reply and job.client:
            self.to_client(
                job.client, Reply(msgid=new_msgid(), payload=EXPIRED_PAYLOAD, reply_to=job.msgid)
            )

    def undo(self, job: RoutedJob) -> None:
        """Sending ``job`` failed: it waits again (its worker keeps the slot)."""
        self.routing.undo(job)
        self.journal.set_state(job.seq, WAITING)
