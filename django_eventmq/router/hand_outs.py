"""Jobs handed out and not sent yet: sent together at the end of a loop iteration,
before the journal commit that stores them returns.

The jobs one loop iteration hands out are sent together: a message written
right after another into the same pipe does not wake ZeroMQ's I/O thread
again, and that wake-up (a system call) was the largest per-job cost of the
router.

A job goes out while the commit that stores it is still in flight (its ACK
waits for that commit, :class:`.commit_acks.CommitAcks`): the job travels to
its job manager while the disk syncs, instead of after. The commit is
synchronous in the router's loop, so whatever the job manager reports comes
after it; if the commit failed, the job and its outcome stay in memory and are
written together once the journal can be written again. Two cases still wait
for a commit that returned (:attr:`HandOuts.durable_seq`): a journal known to
be failing (no job it does not hold goes out during an outage), and a router
group's leader (``before_commit`` off: a leader that lost its lease at the
commit must not have run the job).
"""

from __future__ import annotations

import logging
import math
import time

from django_eventmq.protocol.bundle import bundle, runs
from django_eventmq.protocol.headers import with_reply_requested
from django_eventmq.protocol.packed import pack
from django_eventmq.router.book import Book
from django_eventmq.router.routing import JobManagerPeer, RoutedJob
from django_eventmq.runtime import tracing, transport
from django_eventmq.runtime.outbox import show
from django_eventmq.runtime.transport import Channel

log = logging.getLogger("django_eventmq.router")

#: A job handed out and not sent yet, with the worker it went to.
Unsent = tuple[JobManagerPeer, RoutedJob]


def _asking_reply(frames: list[bytes]) -> list[bytes]:
    """A stored REQUEST's frames with ``reply-requested`` in its header frame."""
    headers = with_reply_requested(frames[5])
    return frames if headers is frames[5] else [*frames[:5], headers, *frames[6:]]


class HandOuts:
    """The router's jobs handed out and not sent yet, and their sending."""

    def __init__(self, backend: Channel, book: Book, *, before_commit: bool = True) -> None:
        """``before_commit``: jobs go out while their commit is in flight (see the
        module doc); off, only once a commit holding them returned."""
        self.backend = backend
        self.book = book
        self.before_commit = before_commit
        #: Jobs handed out and not sent yet, in the order they were handed out.
        self.unsent: list[Unsent] = []
        #: Every job up to this seq is in the journal (a commit returned): only those
        #: are sent while :meth:`flush` waits for commits (see the module doc).
        self.durable_seq = book.last_seq
        #: Seqs of unsent jobs whose leases are paused until they are sent
        #: (:meth:`pause_leases`).
        self.leases_paused: set[int] = set()
        #: A job could not be sent (or a worker came): poll briefly and pump again.
        self.retry = False
        #: The features plugged into the points (:mod:`.stages`; ``handed_out`` here).
        self._stages = book.stages

    def deliver(self, worker: JobManagerPeer, job: RoutedJob) -> None:
        """The book handed ``job`` to ``worker``: sent by :meth:`flush`."""
        self.unsent.append((worker, job))

    def to(self, identity: bytes) -> bool:
        """True if a job handed to the worker ``identity`` is not sent yet."""
        return any(worker.identity == identity for worker, _job in self.unsent)

    def flush(self) -> None:
        """Send the unsent jobs; a job its worker cannot take now waits again (at the
        front). While the journal is failing (or with ``before_commit`` off) a job
        accepted since the last commit that returned stays unsent until one does."""
        if not self.unsent:
            return
        unsent, self.unsent = self.unsent, []
        if self.before_commit and self.book.journal.failure is None:
            ready = unsent
        else:
            durable = self.durable_seq
            ready = [entry for entry in unsent if entry[1].seq <= durable]
            if len(ready) < len(unsent):
                self.unsent = [entry for entry in unsent if entry[1].seq > durable]
        # Per worker, in the order they were handed out: a job manager that reads
        # bundles gets its jobs as one (one send, one receive for the turn).
        by_worker: dict[bytes, list[Unsent]] = {}
        for entry in ready:
            by_worker.setdefault(entry[0].identity, []).append(entry)
        groups = list(by_worker.values())
        for position, group in enumerate(groups):
            try:
                self._send_jobs(group)
            except BaseException:
                # Unexpected (the caller logs it): the other workers' jobs must not be
                # stranded, leased but never sent. They go out next time (this
                # worker's own went back to the unsent in _send_jobs).
                self.unsent[:0] = [e for later in groups[position + 1 :] for e in later]
                raise

    def _send_jobs(self, group: list[Unsent]) -> None:
        """Send the jobs of ``group`` (one worker's, in order): as bundles to a job
        manager that reads them, else one message each. A job taken back meanwhile
        is skipped, one whose worker left waits again; a send the worker cannot take
        now (Again) puts its jobs back to wait, an unreachable worker fails with
        every job of its not sent. When a send raises unexpectedly, the jobs after
        it go back to the unsent, for next time."""
        book = self.book
        identity = group[0][0].identity
        worker = book.routing.workers.get(identity)
        jobs: list[RoutedJob] = []
        for entry_worker, job in group:
            if job.worker != identity:
                continue  # taken back meanwhile (its worker failed): it waits again already
            if worker is not entry_worker:
                book.undo(job)  # its worker left before the job went out
                self.retry = True
                continue
            jobs.append(job)
        if worker is None or not jobs:
            return
        send = self.backend.send_frames
        start = 0
        messages = [job.frames for job in jobs]
        # A worker that INFORMed again has a new session: no bundle before its FEATURES.
        # Cut at what its FEATURES said it takes: ZeroMQ drops a peer for a bigger frame.
        session = worker.session
        if session.bundle and len(jobs) > 1:
            cuts = runs(messages, max_bytes=session.bundle_bytes)
        else:
            cuts = [1] * len(jobs)
        for taken in cuts:
            run = jobs[start : start + taken]
            start += taken
            try:
                if taken > 1:
                    frame = bundle(messages[start - taken : start])
                    send([identity, frame], flags=transport.NOBLOCK)
                elif session.packed:
                    send([identity, pack(run[0].frames)], flags=transport.NOBLOCK)
                elif session.extended:
                    send([identity, *run[0].frames], flags=transport.NOBLOCK)
                else:  # a reference job manager: its REPLY says which job ended
                    send([identity, *_asking_reply(run[0].frames)], flags=transport.NOBLOCK)
            except transport.Again:
                log.debug("worker %s is not taking messages; %d job(s) wait", show(identity), taken)
                for job in run:
                    book.undo(job)
                self.retry = True
                continue
            except BaseException as exc:
                if isinstance(exc, transport.ZMQError) and exc.errno == transport.EHOSTUNREACH:
                    for job in jobs[start - taken :]:
                        book.undo(job)
                    self.drop_worker(identity, "unreachable")  # and its jobs still unsent
                    self.retry = True
                    return
                # The jobs after it go out next time; its own stay leased (handed out
                # again when the lease ends), as a send that may have left.
                self.unsent[:0] = [(worker, job) for job in jobs[start:]]
                raise
            for job in run:
                self._sent(worker, job)

    def _sent(self, worker: JobManagerPeer, job: RoutedJob) -> None:
        """A job went out to ``worker``."""
        worker.last_sent = job.dispatched_at
        book = self.book
        book.stats.dispatched[job.queue] += 1
        if tracing.ON:  # the hand-out span of a traced job (runtime/tracing.py)
            tracing.handed_out(job.frames, job.msgid, job.queue, show(worker.identity))
        for hook in self._stages.handed_out:
            hook(job, worker.identity)
        if self.leases_paused and job.seq in self.leases_paused:
            self.leases_paused.discard(job.seq)
            book.lease(job, time.monotonic())  # paused by the journal: its lease starts now

    def pause_leases(self) -> None:
        """Jobs handed out but unsent (not stored yet) do not run: nor do their
        leases, which start again when they are sent (:meth:`_sent`)."""
        for _worker, job in self.unsent:
            if job.lease_until != math.inf:
                job.lease_until = math.inf
                self.leases_paused.add(job.seq)

    def drop_worker(self, identity: bytes, why: str) -> None:
        """Drop a worker; its unsent jobs never left, so they wait again without a
        death counted (deaths poison a job)."""
        for _worker, job in self.unsent:
            if job.worker == identity:
                self.book.undo(job)  # clears job.worker: the flush skips the entry
        self.book.outcomes.worker_failed(identity, why)
