"""A job's life in the router: accepted, stored, handed out, finished or handed out again.

:class:`Book` joins the routing state (:mod:`.routing`) and the journal
(:mod:`.journal`). It sends nothing itself: it calls ``deliver(worker, job)``
to hand a job to a worker (the router sends it by the end of its loop
iteration, or calls :meth:`Book.undo` if it cannot) and
``to_client(identity, message)`` for messages that the router sends once the
journal is committed (ACKs, replies, REJECTs).

Promises (README "Nothing lost"):

- A job is in the journal before its ACK is sent, and stays there until a
  job manager reports it finished (DONE, a REPLY naming it, or the READY
  approximation for job managers that do not send DONE).
- A job handed out is handed out again when its job manager goes silent,
  leaves without reporting it, answers NACK, its lease runs out, or the
  router restarts: delivery is at-least-once for every accepted job.
- A job whose worker died ``poison_after`` times is set aside (POISONED),
  the client gets REJECT, and admin STATUS / MONITOR list it.
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

import dataclasses
import itertools
import logging
import math
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from django_eventmq.protocol import Message, Reply, new_msgid
from django_eventmq.protocol.extensions import Reject, refusal_reason
from django_eventmq.protocol.headers import Headers
from django_eventmq.protocol.status import EXPIRED_ERROR, JobStatus, expired_reply
from django_eventmq.protocol.views import stored_request
from django_eventmq.router.dedup import FinishedWindow, StoredMsgids
from django_eventmq.router.journal.api import JournalLike
from django_eventmq.router.journal.store import (
    DELAYED,
    LEASED,
    POISONED,
    WAITING,
    JournalUnavailable,
    Row,
    new_row,
    parcel_digest,
)
from django_eventmq.router.rate_limits import RateLimits, queue_rates
from django_eventmq.router.routing import JobManagerPeer, RoutedJob, Routing
from django_eventmq.router.stored import job_from_row, jobs_from_rows
from django_eventmq.router.unique import UniqueKeys
from django_eventmq.router.waiting import Key
from django_eventmq.runtime import retry_policy
from django_eventmq.runtime.logs import job_debug, job_fields
from django_eventmq.runtime.outbox import show
from django_eventmq.runtime.retry import backoff
from django_eventmq.runtime.settings import Settings
from django_eventmq.runtime.stats import Stats

log = logging.getLogger("django_eventmq.router")

#: The NACK reason of a job manager that is shutting down (jobmanager/lifecycle.py sends it).
NACK_STOPPING = "stopping"

#: The reply a client that asked for one gets for a job cancelled before it ran.
CANCELLED_PAYLOAD = (
    '{"value": null, "error": {"type": "Cancelled", "message": "cancelled before it ran",'
    ' "traceback": ""}}'
)
#: The reply a client that asked for one gets for a job that expired before it started.
EXPIRED_PAYLOAD = (
    f'{{"value": null, "error": {{"type": "{EXPIRED_ERROR}", "message": "not started before'
    ' its expiry; it never ran", "traceback": ""}}'
)

#: Seconds added to a parked job's due time: the wall and monotonic clocks are read
#: apart, and a job promoted a hair early would be parked again at the back.
PARK_MARGIN = 0.002

Deliver = Callable[[JobManagerPeer, RoutedJob], None]
ToClient = Callable[[bytes, Message], None]
#: A REQUEST to accept: its frames (as a DEALER sent them), msgid, queue and headers.
Accepting = tuple[list[bytes], str, str, Headers]


def job_values(
    job: RoutedJob, state: int, accepted: float, due: float | None, owner: str | None = None
) -> list[Any]:
    """A new job's journal row (see :meth:`.journal.Journal.add`); ``owner``: the
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


class Book:
    """Every job the router holds, in memory (bounded) and in the journal."""

    def __init__(
        self, settings: Settings, journal: JournalLike, deliver: Deliver, to_client: ToClient
    ) -> None:
        self.settings = settings
        self.journal = journal
        self.deliver = deliver
        self.to_client = to_client
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
        """:func:`.journal.parcel_digest`, once per frame (asked, then stored)."""
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

    # -- reports from workers ---------------------------------------------------------
    def ready(self, identity: bytes, now: float) -> None:
        finished, job = self.routing.ready(identity, now)
        for done in finished:
            job_debug(log, "finished: READY from %s", done.msgid, done.queue, show(identity))
            # A reference job manager does not say how it went.
            self.stats.finish(done.queue, JobStatus.UNKNOWN)
            self._forget_finished(done)
        if job is not None:
            self._hand_out(self.routing.workers[identity], job, now)
        if self._expiry.expired:
            self.settle_expired()

    def reply(self, identity: bytes, msgid: str) -> bytes | None:
        """A worker's REPLY (the reference's way) finished ``msgid``; returns its client."""
        job = self.routing.reply(msgid)
        if job is None:
            job = self._reported_waiting(msgid, "REPLY")
            if job is None:
                return None
        job_debug(log, "finished: REPLY from %s", msgid, job.queue, show(identity))
        self.stats.finish(job.queue, JobStatus.UNKNOWN)
        self._forget_finished(job)
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
                self._hand_out(worker, nxt, now)
            if self._expiry.expired:
                self.settle_expired()
        else:
            job = self.routing.release_msgid(msgid)
        if job is None:
            job = waited
            if job is None:
                return
        job_debug(log, "DONE %s from %s", msgid, job.queue, status, show(identity))
        if status == JobStatus.DIED:
            self._died(job, f"its worker process died ({payload[:200]})")
        elif status == JobStatus.CANCELLED and expired_reply(payload):
            # The job manager held it past its expiry and did not start it.
            self.jobs_expired[job.queue] += 1
            self.stats.finish(job.queue, JobStatus.CANCELLED)  # the DONE words
            self._finish(job, payload)
        elif status == JobStatus.RETRY and job.attempts < job.retry_count:
            self._retry(job, retry_policy.delay_in_payload(payload))
        else:
            self.routing.count_finished(job, identity)
            # A retry past its retry-count is a failure; time from hand-out to report.
            outcome = JobStatus.FAILED if status == JobStatus.RETRY else status
            # A job not handed out by this router (waiting since a restart): time unknown.
            ran = now - job.dispatched_at if job.dispatched_at else None
            self.stats.finish(job.queue, outcome, ran)
            if status == JobStatus.REFUSED:
                self._refused(job, payload)
            else:
                self._finish(job, payload)
        if worker is not None and job.worker is None and self.routing.waiting.get(job.queue):
            self.pump(now, [job.queue])

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
            job = self.routing.release_msgid(msgid)
        else:
            job, nxt = self.routing.done(identity, msgid, now)
            if nxt is not None:
                self._hand_out(worker, nxt, now)
            if self._expiry.expired:
                self.settle_expired()
        if job is None:
            return
        job_debug(log, "NACK (%s), waits again", msgid, job.queue, reason)
        self.journal.requeue(job.seq, job.deaths)
        self.routing.requeued += 1
        self.routing.waiting.push(job)
        self.pump(now, [job.queue])

    def _reported_waiting(self, msgid: str, report: str) -> RoutedJob | None:
        """A report (DONE, REPLY) for a job not in flight: if it waits (requeued
        meanwhile, or recovered as waiting after a restart or a failover, in
        memory or on disk only), it did run: taken out and returned. None if it
        is not held (finished already), or the journal cannot be read now (then
        it stays, and may run again)."""
        try:
            job = self._take_waiting(msgid)
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

    def _take_waiting(self, msgid: str, now: float = 0.0) -> RoutedJob | None:
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
                self._open_parcel(seq)
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
        another. Others are ignored: unknown, finished, or handed out already.
        Returns how many it keeps."""
        if identity not in self.routing.workers:
            return 0
        kept: list[str] = []
        for msgid in msgids:
            if msgid in self.routing.inflight:
                log.debug(
                    "worker %s holds msgid %s, handed out already: ignored", show(identity), msgid
                )
                continue
            try:
                job = self._take_waiting(msgid, now)
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
            self.lease(job, now)
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
    def _died(self, job: RoutedJob, why: str) -> None:
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
            if job.client:
                self.to_client(
                    job.client, Reject(msgid=new_msgid(), job_msgid=job.msgid, reason=reason)
                )
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

    def _finish(self, job: RoutedJob, payload: str | None) -> None:
        self._forget_finished(job)
        if job.reply and job.client and payload is not None:
            self.to_client(
                job.client, Reply(msgid=new_msgid(), payload=payload, reply_to=job.msgid)
            )

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
        self._finish(job, CANCELLED_PAYLOAD)
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
