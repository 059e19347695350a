"""The life of a job inside a job manager: queued, handed to a child, running, over.

:class:`Lifecycle` keeps the jobs a job manager accepted and drives them
through its worker pool: hands them to children (several per pipe write),
reads results, kills a child whose job ran past its ``timeout:N`` or was
cancelled, holds failures retried here until their back-off is over, and
hands back the jobs queued behind a job whose child died or was stopped, so
none is lost. A ``soft-timeout:N`` goes to the child with the job, which
raises it inside the job (:mod:`.invoke`). Every outcome is settled in one
place, :mod:`.endings`. The features on the job's path are stages
(:mod:`.stages`), one module each, registered in :meth:`Lifecycle.__init__`:
this module calls the stages of a job's plan at each point and names none. It
does not talk to the router: every outcome goes to the ``report``/``nack``
callbacks, and the job manager decides how the router hears of it (DONE, or
READY + REPLY).

Timing without extra messages: a child runs its jobs in order and writes
each result as the job ends, so a job starts when the result before it
arrives (or when it was handed to an idle child).
"""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Callable

from django_eventmq.jobmanager.endings import Endings, HandBack, Report
from django_eventmq.jobmanager.expiry import Expiry
from django_eventmq.jobmanager.managed_job import (
    SKIP_CANCEL,
    SKIP_MOVE,
    SKIP_NACK,
    SKIP_TIMEOUT,
    ManagedJob,
    context_line,
)
from django_eventmq.jobmanager.outcomes import Recorder
from django_eventmq.jobmanager.partials import Partials
from django_eventmq.jobmanager.pool import Child, Pool, Status
from django_eventmq.jobmanager.result_records import ResultRecords
from django_eventmq.jobmanager.retries import LocalRetries, RetryDecision
from django_eventmq.jobmanager.run_tracing import RunTracing
from django_eventmq.jobmanager.soft_limits import SoftLimits
from django_eventmq.jobmanager.stages import Ending, Stage, Stages
from django_eventmq.runtime.logs import job_fields, job_name
from django_eventmq.runtime.settings import Settings
from django_eventmq.runtime.stats import Stats

logger = logging.getLogger("django_eventmq.jobmanager")

#: Seconds a running async job gets to end once its task was cancelled (a cancel, its
#: timeout) before its process is stopped: one that blocks the loop never sees it.
ASYNC_CANCEL_GRACE = 2.0

#: Sends one partial (``{"value": ...}`` JSON) of a running job on to the router.
SendPartial = Callable[[ManagedJob, str], None]


class Lifecycle:
    """Jobs of one job manager, from acceptance to outcome."""

    def __init__(
        self,
        settings: Settings,
        pool: Pool,
        recorder: Recorder,
        *,
        report: Report,
        nack: HandBack,
        router_retries: Callable[[], bool],
        partial: SendPartial | None = None,
        retries_for: Callable[[ManagedJob], bool] | None = None,
        wake_supervisor: Callable[[], None] | None = None,
        stages: tuple[Stage, ...] = (),
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.recorder = recorder
        #: Jobs received, dispatched, finished, retried and timed, for metrics.
        self.stats = Stats()
        self.jobs: dict[int, ManagedJob] = {}
        self.pending: deque[int] = deque()  # accepted, waiting for a free child
        #: Failed jobs held for a retry here (a reference router cannot retry).
        self.retries = LocalRetries()
        self._seq = 0
        #: Asks for a supervision pass at the next turn (a child died or retires).
        self.wake_supervisor: Callable[[], None] = wake_supervisor or (lambda: None)
        #: Whether the router a given job came from retries it (several groups:
        #: each link has its own mode); else ``router_retries`` for every job.
        self.router_retries = retries_for or (lambda job: router_retries())
        # The one place that settles a job's outcome, and the features on its path.
        self.endings = Endings(
            self.jobs,
            self.stats,
            self.retries,
            report=report,
            nack=nack,
            router_retries=self.router_retries,
        )
        #: The retry decision on a failed attempt (its jitter: ``retry_decision.random``).
        self.retry_decision = RetryDecision(settings, self.router_retries, random.random)
        self.records = ResultRecords(recorder)
        #: At most PARTIAL_RATE partials per second per job go on; the rest coalesce.
        #: Not in the tuple below: it joins a job's plan at its first partial.
        self.partials = Partials(partial or (lambda job, payload: None))
        #: The stages, in the order they act at each point (a new feature: a module
        #: with a Stage, and a line here); ``stages``: more, after these.
        self.stages = Stages(
            (
                self.retry_decision,
                self.records,
                RunTracing(),
                SoftLimits(),
                Expiry(self.endings.expired),
                *stages,
            )
        )
        self._fit = self.stages.fit

    @property
    def random(self) -> Callable[[], float]:
        """Draws in [0, 1) for retry jitter (runtime/retry_policy.py)."""
        return self.retry_decision.random

    @random.setter
    def random(self, rand: Callable[[], float]) -> None:
        self.retry_decision.random = rand

    # -- taking jobs in and handing them out ----------------------------------------
    def accept(self, job: ManagedJob) -> None:
        """Take a job (its plan: the features that act on it, :mod:`.stages`);
        :meth:`dispatch` hands it to a child."""
        last = self.stages.last
        plan = last[2] if job.record else last[1]
        if last[0] is job.headers and not plan.accepted:
            # Sent with the same headers as the last job (most are), and no stage to
            # call: its plan without a call (Stages.fit would give it the same).
            job.plan = plan
        else:
            self._fit(job)
        self._seq += 1
        self.jobs[self._seq] = job
        self.pending.append(self._seq)
        self.kind(job)  # now if known, so the credit follows at once

    def kind(self, job: ManagedJob) -> bool:
        """Whether ``job`` is async, once the children said which jobs are (a job
        that came before stays undecided until it is handed to a child, which is UP)."""
        concurrent = job.concurrent
        if concurrent is None:
            pool = self.pool
            if not pool.kinds_known:
                return False
            names = pool.async_names
            # Only where async jobs are registered: a look into the body.
            concurrent = job.concurrent = bool(names) and job_name(job.body_text) in names
        return concurrent

    def dispatch(self, now: float, *, idle_only: bool = False) -> None:
        """Hand pending jobs to children that can take them, one write per child.

        ``idle_only``: only to children with no job (the job manager's call as
        each job arrives, so a job an idle child can run starts before the rest
        of what the router sent is read; jobs queued behind others wait for the
        turn's call, to go in one write per child).
        """
        pending, jobs, pool = self.pending, self.jobs, self.pool
        pick = pool.pick_idle if idle_only else pool.pick
        touched: list[Child] = []
        while pending:
            job = jobs.get(pending[0])
            if job is None or job.child is not None:  # cancelled, or a stale entry
                pending.popleft()
                continue
            if job.plan.handing_out and (ending := _stopped(job, now)) is not None:
                del jobs[pending.popleft()]  # settled, not started (expired...)
                ending(job, now)
                continue
            concurrent = self.kind(job)
            child = pick(len(job.body_text) + 16, concurrent)
            if child is None:
                break
            seq = pending.popleft()
            job.child = child
            starts = pool.assign(
                child,
                seq,
                job.msgid,
                job.body_text,
                now,
                job.soft_timeout,
                job.trace,
                context_line(job),
                concurrent,
            )
            self.stats.dispatched[job.queue] += 1
            if len(child.outgoing) == 1:
                touched.append(child)
            if starts:
                job.began = now
                if started := job.plan.started:  # a test costs less than a loop
                    for hook in started:
                        hook(job, child)
        for child in touched:
            try:
                pool.flush(child)
            except OSError:
                self.wake_supervisor()  # it died under us; reaping hands its jobs back

    def receive(self, child: Child, now: float) -> bool:
        """Take in what ``child`` wrote and settle the jobs it finished (True if any)."""
        results = self.pool.receive(child, now)
        if child.partials:
            self.partials.take(child, self.jobs, now)
        if not results:
            return False
        moved = self.endings.finish(results, now)
        if moved:
            self._hand_back(moved)
        head = child.head
        if head is not None:
            self._running(child, head, now)
        for seq, since in child.tasks.items():  # async jobs that took the freed room
            self._running(child, seq, since)
        if child.status is Status.RETIRING:
            self.wake_supervisor()  # let it go and start its replacement now
        return True

    def _running(self, child: Child, seq: int, since: float) -> None:
        """Job ``seq`` runs in ``child`` (since ``since``, if that is news)."""
        job = self.jobs.get(seq)
        if job is None:
            return
        if not job.began:
            job.began = since
            if started := job.plan.started:
                for hook in started:
                    hook(job, child)

    # -- outcomes (settled in .endings) ------------------------------------------------
    def finish(self, results: list[tuple[int, str, str]], now: float) -> None:
        """Settle each job a child finished (``(seq, child status, payload)``)."""
        moved = self.endings.finish(results, now)
        if moved:
            self._hand_back(moved)

    def renew(self, now: float) -> int:
        """Warm restart (SIGHUP): the pool's children are replaced; the jobs queued in
        the old ones behind the jobs each runs are taken back for the new ones (old
        code runs no job from now on), and idle old ones are told to exit at once.
        How many children are replaced."""
        old = self.pool.renew()
        jobs = self.jobs
        for child in old:
            for seq in list(child.inflight):
                job = jobs.get(seq)
                if job is not None and not job.skip and not child.runs(seq):
                    job.skip = SKIP_MOVE  # its child answers "cancelled" (not started)
                    self.pool.cancel(child, seq)
        self.pool.check(now)
        return len(old)

    def refuse(self, job: ManagedJob, name: str, reason: str, now: float) -> None:
        """Answer a job that is not held (nor run) with ``refused``, as a child would."""
        self._fit(job)  # its records, if it is recorded
        self.endings.refuse(job, name, reason, now)

    # -- supervision: retries due, timeouts, children that died -----------------------------
    def due_retries(self, now: float) -> None:
        """Queue held jobs whose back-off has passed."""
        jobs, pending = self.jobs, self.pending
        for seq in self.retries.take_due(now):
            job = jobs.get(seq)
            if job is not None and job.child is None:
                pending.append(seq)

    def next_retry(self) -> float | None:
        return self.retries.next_due()

    def check_timeouts(self, now: float) -> None:
        """Stop children whose running job is past its ``timeout:N``."""
        for child in list(self.pool.children.values()):
            if not child.inflight or child.status not in (Status.UP, Status.RETIRING):
                continue
            if child.tasks and self._check_tasks(child, now):
                continue
            if child.head in child.tasks:
                continue  # an async job: _check_tasks times it
            job = self.jobs.get(child.head or 0)
            if job is None or not job.timeout or now - child.head_since < job.timeout:
                continue
            self.receive(child, now)  # it may have just finished
            seq = child.head
            if seq is None or self.jobs.get(seq) is not job:
                continue
            _log_timeout(job, f"stopping worker pid={child.pid}")
            del self.jobs[seq]
            self.stop_child(child, now)
            self.endings.timed_out(job, now)

    def _check_tasks(self, child: Child, now: float) -> bool:
        """Cancel the task of each async job of ``child`` past its ``timeout`` (the
        others on the loop go on); stop the child if a cancelled one did not end
        within :data:`ASYNC_CANCEL_GRACE`. True if it was stopped."""
        for seq, since in list(child.tasks.items()):
            job = self.jobs.get(seq)
            if job is None:
                continue
            if job.cancel_by:
                if now < job.cancel_by:
                    continue
                self.receive(child, now)  # it may have just ended
                if self.jobs.get(seq) is not job:
                    continue
                logger.warning(
                    "async job msgid=%s did not end within %gs of its cancel (it blocks "
                    "the event loop?); stopping worker pid=%d and the jobs it runs",
                    job.msgid,
                    ASYNC_CANCEL_GRACE,
                    child.pid,
                )
                del self.jobs[seq]
                self.stop_child(child, now)
                if job.skip == SKIP_TIMEOUT:
                    self.endings.timed_out(job, now)
                else:
                    self.endings.cancelled(job)
                return True
            if job.timeout and now - since >= job.timeout:
                _log_timeout(job, f"cancelling its task in worker pid={child.pid}")
                self._cancel_task(child, seq, job, SKIP_TIMEOUT, now)
        return False

    def _cancel_task(self, child: Child, seq: int, job: ManagedJob, why: str, now: float) -> None:
        """Ask ``child`` to cancel the task of running async job ``seq``."""
        job.skip = why
        job.cancel_by = now + ASYNC_CANCEL_GRACE
        self.pool.cancel(child, seq)

    def stop_child(self, child: Child, now: float) -> None:
        """Kill ``child``; its queued jobs and unhandled records go to other children.

        The caller takes the job it stopped it for out of :attr:`jobs` first and
        reports it; other async jobs it was running beside it are reported lost,
        as if it had died (or cancelled or timed out, if they were being)."""
        taken = self.pool.kill(child, now)
        for seq in taken.running:
            job = self.jobs.pop(seq, None)
            if job is None:  # the caller's (it took it out first)
                continue
            if job.skip == SKIP_TIMEOUT:
                self.endings.timed_out(job, now)
            elif job.skip == SKIP_CANCEL:
                self.endings.cancelled(job)
            else:
                self.endings.lost(job, child.pid, None, now)
        self._hand_back(taken.queued)
        self.recorder.resend(taken.records)  # a stopped child's records go to another
        self.wake_supervisor()

    def _hand_back(self, seqs: list[int]) -> None:
        """Queue jobs again (first in line, in order) that a child never started."""
        for seq in reversed(seqs):
            job = self.jobs.get(seq)
            if job is None:
                continue
            job.child = None
            if job.skip == SKIP_MOVE:
                job.skip = ""
            if job.skip:
                del self.jobs[seq]
                self.endings.skipped(job)
            else:
                self.pending.appendleft(seq)

    def lost(self, now: float) -> int:
        """Reap children that exited: report the job each was running, requeue the rest."""
        for child in self.pool.died():
            # What it wrote before it died is its jobs' outcome (supervision may see
            # the exit before the pipe is read): read it, or those jobs run again.
            while self.receive(child, now):
                pass
        lost = self.pool.reap(now)
        requeue: list[int] = []
        for item in lost:
            if not item.started:
                requeue.append(item.seq)
                continue
            job = self.jobs.pop(item.seq, None)
            if job is None:
                continue
            self.endings.lost(job, item.pid, item.exitcode, now)
        self._hand_back(requeue)
        return len(lost)

    # -- cancel and shutdown ---------------------------------------------------------
    def find(self, msgid: str) -> tuple[int, ManagedJob] | None:
        for seq, job in self.jobs.items():
            if job.msgid == msgid:
                return seq, job
        return None

    def cancel(self, msgid: str, now: float) -> None:
        """Cancel a job: drop it if not started, stop its child if running."""
        found = self.find(msgid)
        if found is None:
            logger.debug("cancel for job msgid=%s that we do not hold", msgid)
            return
        seq, job = found
        child = job.child
        if child is None:  # waiting for a child, or for a retry
            del self.jobs[seq]
            self.endings.cancelled(job)
            return
        self.receive(child, now)  # settle what it already finished
        if self.jobs.get(seq) is not job:
            return  # it finished meanwhile and was reported
        if seq in child.tasks:  # an async job: only its task is cancelled
            logger.info("cancelling running async job msgid=%s in worker pid=%d", msgid, child.pid)
            self._cancel_task(child, seq, job, SKIP_CANCEL, now)
            return
        if child.head != seq:
            job.skip = SKIP_CANCEL
            self.pool.cancel(child, seq)
            return
        logger.info("cancelling running job msgid=%s: stopping worker pid=%d", msgid, child.pid)
        del self.jobs[seq]
        self.stop_child(child, now)
        self.endings.cancelled(job)

    def set_aside(self, msgid: str, reason: str, now: float) -> None:
        """The router set aside (poisoned) a job whose worker death we reported."""
        self.endings.set_aside(msgid, reason, now)

    def hand_back_waiting(self, reason: str, which: Callable[[ManagedJob], bool]) -> int:
        """Give back (NACK ``reason``) the jobs no child holds, waiting for one or for
        a local retry, of those ``which`` says yes to; how many."""
        given = 0
        for seq, job in list(self.jobs.items()):
            if job.child is None and which(job):
                del self.jobs[seq]
                self.endings.nack(job, reason)
                given += 1
        if given:
            self._drop_stale_entries()
        return given

    def _drop_stale_entries(self) -> None:
        """Keep in the pending queue and the retry heap only jobs still held."""
        jobs = self.jobs
        self.pending = deque(seq for seq in self.pending if seq in jobs)
        self.retries.keep(jobs)

    def hand_back_unstarted(self, which: Callable[[ManagedJob], bool] | None = None) -> None:
        """Give back every job that has not started (graceful stop with our router);
        ``which``: only those it says yes to (the jobs of the groups that take them back)."""
        for seq, job in list(self.jobs.items()):
            if which is not None and not which(job):
                continue
            child = job.child
            if child is None:
                del self.jobs[seq]
                self.endings.nack(job, "stopping")
            elif not child.runs(seq) and job.skip not in (SKIP_CANCEL, SKIP_TIMEOUT):
                if not job.skip:  # SKIP_MOVE: its cancel is on its way already
                    self.pool.cancel(child, seq)
                job.skip = SKIP_NACK
        if which is None:
            self.pending.clear()
            self.retries.clear()
        else:
            self._drop_stale_entries()


def _stopped(job: ManagedJob, now: float) -> Ending | None:
    """The ending a ``handing_out`` stage settles ``job`` with instead (None: it runs)."""
    for check in job.plan.handing_out:
        ending = check(job, now)
        if ending is not None:
            return ending
    return None


def _log_timeout(job: ManagedJob, action: str) -> None:
    name = job_name(job.body_text)
    logger.warning(
        "job timed out msgid=%s job=%s queue=%s after %ds; %s",
        job.msgid,
        name,
        job.queue,
        job.timeout,
        action,
        extra=job_fields(job.msgid, job.queue, name),
    )
