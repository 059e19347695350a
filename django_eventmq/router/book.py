"""A job's life in the router: accepted, stored, handed out, finished or handed out again.

:class:`Book` joins the routing state (:mod:`.routing`) and the journal
(:mod:`.journal`). It sends nothing itself: it calls ``deliver(worker, job)``
to hand a job to a worker (the router sends it by the end of its loop
iteration, or calls :meth:`Book.undo` if it cannot) and
``to_client(identity, message)`` for what it tells clients (replies, REJECTs),
and ``after_commit(identity, message)`` for what must wait for the journal
commit holding the change it tells of (a cancelled job's answer, a poisoned
job's REJECT: a crash before that commit would run the job again). Its parts,
each with its own state: :attr:`Book.delays` (:mod:`.delays`: delayed and
rate-limit parked jobs), :attr:`Book.outcomes` (:mod:`.outcomes`: what becomes
of a job: lost, finished, refused, cancelled), :attr:`Book.poisoned`
(:mod:`.poisoned`), :attr:`Book.retries` (:mod:`.retries`),
:attr:`Book.expired_jobs` (:mod:`.expiry`: jobs not started before their
expiry) and
:attr:`Book.reports` (:mod:`.reports`: what job managers report).

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
time; see :mod:`.expiry`.

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
from collections.abc import Callable, Iterable

from django_eventmq.protocol import Message, new_msgid
from django_eventmq.protocol.extensions import Reject
from django_eventmq.protocol.headers import Headers
from django_eventmq.router.dedup import FinishedWindow, StoredMsgids
from django_eventmq.router.delays import Delays
from django_eventmq.router.expiry import ExpiredJobs
from django_eventmq.router.journal.api import JournalLike
from django_eventmq.router.journal.store import (
    DELAYED,
    LEASED,
    POISONED,
    WAITING,
    JournalUnavailable,
    Parcel,
    job_values,
    parcel_digest,
)
from django_eventmq.router.outcomes import Outcomes
from django_eventmq.router.poisoned import PoisonedJobs
from django_eventmq.router.rate_limits import RateLimits, queue_rates
from django_eventmq.router.reports import Reports
from django_eventmq.router.retries import Retries
from django_eventmq.router.routing import JobManagerPeer, RoutedJob, Routing
from django_eventmq.router.stages import Stages
from django_eventmq.router.stored import jobs_from_rows
from django_eventmq.router.unique import UniqueKeys
from django_eventmq.router.waiting import Key
from django_eventmq.runtime.logs import job_debug
from django_eventmq.runtime.outbox import show
from django_eventmq.runtime.settings import Settings
from django_eventmq.runtime.stats import Stats

log = logging.getLogger("django_eventmq.router")

Deliver = Callable[[JobManagerPeer, RoutedJob], None]
#: Sends a message to a client (what it returns is not used).
ToClient = Callable[[bytes, Message], object]
#: Tells the job manager ``identity`` that the job ``msgid`` whose death it reported is
#: set aside (``reason``), once the journal holds that (``CommitAcks.tell_set_aside``).
SetAside = Callable[[bytes, str, str], None]
#: A REQUEST to accept: its frames (as a DEALER sent them), msgid, queue and headers.
Accepting = tuple[list[bytes], str, str, Headers]


def _not_connected(worker: JobManagerPeer, job: RoutedJob) -> None:
    raise RuntimeError("Book.connect() was not called: nothing sends its hand-outs")


class Book:
    """Every job the router holds, in memory (bounded) and in the journal."""

    def __init__(
        self,
        settings: Settings,
        journal: JournalLike,
        deliver: Deliver | None = None,
        to_client: ToClient = lambda identity, message: None,
        after_commit: ToClient | None = None,
        set_aside: SetAside | None = None,
    ) -> None:
        """``deliver``: hands a job to a worker (or given by :meth:`connect`);
        ``after_commit``: sends what tells a client of a change the journal must
        hold first (by default ``to_client``: a book alone, in tests); ``set_aside``:
        tells a job manager that a job whose death it reported is poisoned."""
        self.settings = settings
        self.journal = journal
        self.deliver: Deliver = deliver or _not_connected
        self.to_client = to_client
        self.after_commit = after_commit or to_client
        self.set_aside = set_aside
        self.routing = Routing(settings.queue_window, self._load)
        #: Rate limits per queue (RATE_LIMITS) and per rate key (headers); docs/rate-limits.md.
        self.rate_limits = RateLimits(queue_rates(settings.rate_limits))
        self.routing.waiting.limits = self.rate_limits
        self.duplicates = 0
        self.rejected = 0
        self.recovered = 0
        #: Jobs received, handed out, finished, retried; read by admin STATUS and metrics.
        self.stats = Stats()
        #: msgids finished recently (kept in the journal too): a resend is not run again.
        self.finished = FinishedWindow(journal, settings.dedup_memory, settings.dedup_window)
        #: msgids that may be in a job row (no lookup for the others; see :meth:`accept`).
        self.stored_msgids = StoredMsgids()
        #: Jobs a pop took aside (expired, parked): settled at the ``settling`` point.
        self._aside = self.routing.waiting.aside
        #: The features plugged into the points of a job's path (:mod:`.stages`).
        self.stages = Stages()
        #: Unique jobs' keys and who holds them (:mod:`.unique`): a stage.
        self.unique = UniqueKeys()
        self.stages.plug(self.unique)
        self._seq = 0
        #: The parts (see the module doc).
        self.delays = Delays(journal, self.routing, self.rate_limits)
        self.rate_limits.connect(self.delays.delay, self.finished)
        self.poisoned = PoisonedJobs(self)
        self.stages.plug(self.poisoned)
        self.retries = Retries(self)
        self.stages.plug(self.retries)
        self.outcomes = Outcomes(self)
        self.expired_jobs = ExpiredJobs(self)
        # Expired jobs are finished first, then parked ones delayed (the order before).
        self.stages.plug(self.expired_jobs)  # settling, cancel_reported
        self.stages.plug(self.rate_limits)
        self.reports = Reports(self)
        self._last_digest: tuple[bytes, bytes] | None = None

    def connect(self, deliver: Deliver, after_commit: ToClient, set_aside: SetAside) -> None:
        """The router's parts that send what the book hands out and tells (made
        after the book: they use it)."""
        self.deliver = deliver
        self.after_commit = after_commit
        self.set_aside = set_aside

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
        delayed = self.delays.delayed = counts[DELAYED]
        poisoned = self.poisoned.by_queue = counts[POISONED]
        self._seq = journal.max_seq()
        self.delays.due_at = journal.next_due()
        # Unique jobs' keys: those of held jobs, before anyone is answered.
        if keys := self.unique.rebuild(journal.unique_rows()):
            log.info("unique keys read back: %d held by jobs in the journal", keys)
        if self.finished.load():
            log.info(
                "journal %s: %d recently finished msgid(s) will not run again if resent",
                journal.path,
                len(self.finished),
            )
        held = sum(counts[WAITING].values()) + sum(delayed.values())
        if held or poisoned:
            log.warning(
                "journal %s: %d job(s) waiting (%d of them had been handed out and are handed "
                "out again), %d delayed, %d poisoned",
                journal.path,
                sum(counts[WAITING].values()),
                self.recovered,
                sum(delayed.values()),
                sum(poisoned.values()),
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
                self.open_parcel(seq)
                rows = journal.waiting(queue, after, limit)
        except JournalUnavailable:
            return None
        return jobs_from_rows(rows, time.monotonic())

    def open_parcel(self, seq: int) -> None:
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
        return self.routing.waiting.total() + sum(self.delays.delayed.values())

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
            or any(self.delays.delayed.values())
            or any(self.poisoned.by_queue.values())
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
            self.expired_jobs.expired(job, stored=False)
            return True
        due = headers.delay_until
        delayed = due is not None and due > wall
        if not headers.extra:
            job.rate = None  # no rate-limit header to look for
        limited = self.rate_limits.limited(job)  # then it goes out through its wait queue
        worker = None if delayed or limited else self.routing.free_worker(queue)
        state = DELAYED if delayed else (LEASED if worker is not None else WAITING)
        stored = self.journal.add(
            job_values(job, state, wall, (due or 0.0) if delayed else 0.0, owner),
            on_disk=self._may_be_stored(msgid),
        )
        self.stored_msgids.add(msgid)
        if not stored:
            self.duplicates += 1
            return False
        for hook in self.stages.accepted:
            hook(job, headers, wall)
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
                job_values(job, WAITING if due is None else DELAYED, wall, due or 0.0, owner)
                for job, due in fresh
            ]
        )
        for job, _ in fresh:
            self.stored_msgids.add(job.msgid)
        accepted = self.stages.accepted
        headers_of = {msgid: headers for _, msgid, _, headers in requests} if accepted else {}
        for job, due in fresh:
            if job.seq in stored:
                for hook in accepted:
                    hook(job, headers_of[job.msgid], wall)
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
            Parcel(
                seq=seq,
                count=count,
                queue=queue,
                priority=headers.priority,
                guarantee=headers.guarantee,
                headers=headers_frame,
                client=identity,
                accepted=time.time(),
                jobs=jobs_frame,
                digest=self._digest(jobs_frame),
            )
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
        """:func:`.journal.parcels.parcel_digest`, once per frame (asked, then stored)."""
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
            self.delays.delayed[queue] += 1
            self.delays.due_sooner(due)
            return
        worker = self.routing.submit(job, now)
        if worker is not None:
            self.hand_out(worker, job, now, stored_as_leased=stored_as_leased)
        if self._aside:
            self.settle()

    def reject(self, identity: bytes, msgid: str, reason: str) -> None:
        self.rejected += 1
        self.to_client(identity, Reject(msgid=new_msgid(), job_msgid=msgid, reason=reason))

    # -- handing out ---------------------------------------------------------------
    def hand_out(
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
                self.hand_out(*pair, now)
        if self._aside:
            self.settle()

    def next_due(self) -> float | None:
        """When the router must wake up for a delayed job (:meth:`.Delays.next_due`)."""
        return self.delays.next_due()

    def settle(self) -> None:
        """The ``settling`` point (:mod:`.stages`): each feature settles the jobs a
        pop took aside (:attr:`.Waiting.aside`) instead of handing them out."""
        self._aside.clear()
        for hook in self.stages.settling:
            hook()

    def promote_due(self, wall: float, now: float) -> None:
        """Delayed jobs whose time has come start waiting (or run); queues at their
        rate limit whose time has come go on."""
        delays = self.delays
        if self._aside:
            self.settle()
        due = self.rate_limits.due_queues()
        if due:
            self.pump(now, due)
        queues = delays.promote(wall, now)
        if queues is not None:
            self.pump(now, queues)

    def undo(self, job: RoutedJob) -> None:
        """Sending ``job`` failed: it waits again (its worker keeps the slot)."""
        self.routing.undo(job)
        self.journal.set_state(job.seq, WAITING)
