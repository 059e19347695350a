"""The life of a job inside a job manager: queued, handed to a child, running, over.

:class:`Lifecycle` keeps the jobs a job manager accepted and drives them
through its worker pool: hands them to children (several per pipe write),
reads results, kills a child whose job ran past its ``timeout:N`` or was
cancelled, retries failures, and hands back the jobs queued behind a job
whose child died or was stopped, so none is lost. A ``soft-timeout:N`` goes
to the child with the job, which raises it inside the job (:mod:`.invoke`). It does not talk to the
router: every outcome goes to the ``report``/``nack`` callbacks, and the job
manager decides how the router hears of it (DONE, or READY + REPLY).

Timing without extra messages: a child runs its jobs in order and writes
each result as the job ends, so a job starts when the result before it
arrives (or when it was handed to an idle child).
"""

from __future__ import annotations

import heapq
import json
import logging
import random
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

from django_eventmq.jobmanager import outcomes
from django_eventmq.jobmanager.outcomes import Recorder
from django_eventmq.jobmanager.partials import Coalescer
from django_eventmq.jobmanager.pool import Child, Pool, Status
from django_eventmq.protocol.headers import EMPTY_HEADERS, Headers
from django_eventmq.protocol.status import NOT_RUN, JobStatus
from django_eventmq.runtime import job_context, retry_policy
from django_eventmq.runtime.logs import job_debug, job_fields, job_name
from django_eventmq.runtime.settings import Settings
from django_eventmq.runtime.stats import Stats

logger = logging.getLogger("django_eventmq.jobmanager")

#: Why a job was asked to be skipped in its child.
SKIP_CANCEL = "cancel"
SKIP_NACK = "nack"
#: Taken back from a child a reload replaces: it runs in a new one (the new code).
SKIP_MOVE = "move"
#: Recorded jobs whose worker process died, kept (the latest) until the router says
#: whether it set one aside (:meth:`Lifecycle.set_aside`); it says so right away.
DIED_KEPT = 1000
#: An async job past its ``timeout``: its task was cancelled (the others on the loop go on).
SKIP_TIMEOUT = "timeout"

#: Seconds a running async job gets to end once its task was cancelled (a cancel, its
#: timeout) before its process is stopped: one that blocks the loop never sees it.
ASYNC_CANCEL_GRACE = 2.0


@dataclass(slots=True, eq=False)
class ManagedJob:
    """A job this job manager accepted and has not finished."""

    msgid: str
    queue: str
    body_text: str
    reply_requested: bool
    timeout: int = 0
    retry_count: int = 0
    attempt: int = 1
    #: Outcome records are kept for it (reply requested, or RECORD_ALL_RESULTS).
    record: bool = False
    child: Child | None = None
    started: float | None = None  # unix time, for records
    pid: int | None = None
    #: Its child was asked to skip it: SKIP_CANCEL or SKIP_NACK.
    skip: str = ""
    #: Monotonic time it became its child's running job, as far as we saw (0: not seen).
    began: float = 0.0
    #: The router group it came from (index of the job manager's link): its
    #: outcome goes back there.
    link: int = 0
    #: Seconds after which its child raises SoftTimeLimitExceeded inside it
    #: (the ``soft-timeout`` header; None: no soft limit). ``timeout`` still kills.
    soft_timeout: int | None = None
    #: Unix time after which it is not started (the ``expires`` header; None: never).
    expires: float | None = None
    #: Its trace context for the child's run span (runtime/tracing.py; b"": untraced).
    trace: bytes = b""
    #: The headers it was sent with: a dead letter keeps their options (timeout, priority...).
    headers: Headers | None = None
    #: An ``async def`` job: it runs beside others on its child's event loop (:mod:`.tasks`);
    #: None until the children said which jobs are (:meth:`Lifecycle.kind`).
    concurrent: bool | None = None
    #: Monotonic time by which its cancelled task must have ended (0: not cancelled).
    cancel_by: float = 0.0


def context_line(job: ManagedJob) -> bytes:
    """What the child is told about ``job`` for ``current_job()`` (runtime/job_context.py)."""
    headers = job.headers
    text = "" if headers is None or headers is EMPTY_HEADERS else _header_text(headers)
    return job_context.encode_line(job.msgid, job.queue, job.attempt, text)


#: Headers come parsed, one object per distinct header frame (parse_headers caches
#: them): their text is made once for all the jobs that share them, found by the
#: object's id (hashing a Headers costs more than making its text); the entry
#: holds the object, so its id is not reused while it is there.
_header_texts: dict[int, tuple[Headers, str]] = {}


def _header_text(headers: Headers) -> str:
    found = _header_texts.get(id(headers))
    if found is not None and found[0] is headers:
        return found[1]
    text = headers.encode()
    if len(_header_texts) >= 256:
        _header_texts.clear()
    _header_texts[id(headers)] = (headers, text)
    return text


#: Reports a job's outcome: ``(job, DONE status, reply payload)``.
Report = Callable[[ManagedJob, JobStatus, str], None]
#: Hands a job back unrun, with the reason (the job manager sends a NACK, or
#: READY to a reference router). Not named ``Nack``: that is the protocol message.
HandBack = Callable[[ManagedJob, str], None]
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
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.recorder = recorder
        #: Jobs received, dispatched, finished, retried and timed, for metrics.
        self.stats = Stats()
        #: Reports an outcome: held partials go first, then it is counted.
        self._report = self._counted(self._after_partials(report))
        self._send_partial = partial or (lambda job, payload: None)
        #: At most PARTIAL_RATE partials per second per job go on; the rest coalesce.
        self.partials: Coalescer[ManagedJob] = Coalescer(self._partial)
        self._nack = nack
        self._router_retries = router_retries
        #: Whether the router a given job came from retries it (several groups:
        #: each link has its own mode); None: ``router_retries`` for every job.
        self._retries_for = retries_for
        self.jobs: dict[int, ManagedJob] = {}
        self.pending: deque[int] = deque()  # accepted, waiting for a free child
        self._retries: list[tuple[float, int]] = []  # (due, seq) held for a local retry
        #: Draws in [0, 1) for retry jitter (runtime/retry_policy.py).
        self.random: Callable[[], float] = random.random
        self._seq = 0
        #: Asks for a supervision pass at the next turn (a child died or retires).
        self.wake_supervisor: Callable[[], None] = wake_supervisor or (lambda: None)
        #: Recorded ``retrying`` at their worker's death, as the router hands them out
        #: again, unless it sets one aside (then :meth:`set_aside` records its end).
        self.died: OrderedDict[str, tuple[ManagedJob, str]] = OrderedDict()

    # -- taking jobs in and handing them out ----------------------------------------
    def accept(self, job: ManagedJob) -> None:
        """Take a job; :meth:`dispatch` hands it to a child."""
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
            if job.expires is not None and job.expires <= time.time():
                # It waited here (prefetched, or for a retry) past its expiry: not started.
                del jobs[pending.popleft()]
                self._expired(job, now)
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
            if starts and job.record:
                self._started(job, child)
        for child in touched:
            try:
                pool.flush(child)
            except OSError:
                self.wake_supervisor()  # it died under us; reaping hands its jobs back

    def receive(self, child: Child, now: float) -> bool:
        """Take in what ``child`` wrote and settle the jobs it finished (True if any)."""
        results = self.pool.receive(child, now)
        if child.partials:
            self._take_partials(child, now)
        if not results:
            return False
        self.finish(results, now)
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
        if job.record and job.started is None:
            self._started(job, child)

    # -- partials (see .progress) -----------------------------------------------------
    def _take_partials(self, child: Child, now: float) -> None:
        jobs, offer = self.jobs, self.partials.offer
        for seq, payload in child.partials:
            job = jobs.get(seq)
            if job is not None and job.child is child:
                offer(job, payload, now)
        child.partials.clear()

    def _partial(self, job: ManagedJob, payload: str) -> None:
        """A partial let through: on to the router, and onto the job's record."""
        if job.record:
            if job.started is None and job.child is not None:
                self._started(job, job.child)  # its RUNNING record goes first
            try:
                value = json.loads(payload)["value"]
            except (ValueError, KeyError, TypeError):
                value = None
            self._add_record(job, JobStatus.RUNNING, None, time.monotonic(), progress=value)
        self._send_partial(job, payload)

    def _counted(self, report: Report) -> Report:
        """``report``, after counting the outcome and timing the run in :attr:`stats`."""
        stats = self.stats

        def report_counted(job: ManagedJob, status: JobStatus, payload: str) -> None:
            if status != JobStatus.RETRY:  # a retry is counted by _retry, the job goes on
                ran: float | None = None  # refused or cancelled: not timed
                if job.began:
                    ran = time.monotonic() - job.began
                elif job.child is not None and status not in NOT_RUN:
                    ran = 0.0  # not seen running: it ran between two reads of its child
                stats.finish(job.queue, status, ran)
                job_debug(logger, "%s", job.msgid, job.queue, status, body=job.body_text)
            report(job, status, payload)

        return report_counted

    def _after_partials(self, report: Report) -> Report:
        """``report``, after the job's held partial (its outcome comes after its partials)."""

        def report_last(job: ManagedJob, status: JobStatus, payload: str) -> None:
            self.partials.flush(job)
            report(job, status, payload)

        return report_last

    # -- outcomes ---------------------------------------------------------------------
    def finish(self, results: list[tuple[int, str, str]], now: float) -> None:
        """Report the outcome of each finished job."""
        jobs = self.jobs
        moved: list[int] = []
        for seq, status, payload in results:
            job = jobs.pop(seq, None)
            if job is None:
                continue
            if status == JobStatus.CANCELLED and job.skip == SKIP_MOVE:
                jobs[seq] = job  # not over: it waits for a new child
                moved.append(seq)
            elif status == JobStatus.OK:
                if job.record:
                    value = json.loads(payload).get("value")
                    self._record(job, JobStatus.SUCCEEDED, now, value=value)
                self._report(job, JobStatus.OK, payload)
            elif status == JobStatus.CANCELLED:
                self._skipped(job)
            elif status == JobStatus.FAILED and (decision := self._decide(job, payload)).retry:
                self._retry(seq, job, payload, now, decision)
            else:
                self._failed(job, status, payload, now)
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
        detail = {"job": name, "type": "JobNotAllowed", "message": reason, "traceback": ""}
        self._failed(job, JobStatus.REFUSED, json.dumps(detail), now)

    def _failed(self, job: ManagedJob, status: str, payload: str, now: float) -> None:
        name, error = outcomes.parse_failure(payload)
        if status == JobStatus.REFUSED:
            logger.warning(
                "refused job msgid=%s job=%s queue=%s: %s",
                job.msgid,
                name,
                job.queue,
                error["message"],
                extra=job_fields(job.msgid, job.queue, name),
            )
        else:
            logger.warning(
                "job failed msgid=%s job=%s queue=%s attempt=%d: %s: %s",
                job.msgid,
                name,
                job.queue,
                job.attempt,
                error["type"],
                error["message"],
                extra=job_fields(job.msgid, job.queue, name),
            )
            if error["traceback"]:
                logger.debug("traceback of job msgid=%s:\n%s", job.msgid, error["traceback"])
        if job.record:
            self._record(job, JobStatus.FAILED, now, error=error)
        done = JobStatus.REFUSED if status == JobStatus.REFUSED else JobStatus.FAILED
        self._report(
            job, done, outcomes.error_payload(error["type"], error["message"], error["traceback"])
        )

    def _decide(self, job: ManagedJob, payload: str) -> retry_policy.Decision:
        """Retry a failed ``job``? Its retry-count and the child's advice (its policy) say."""
        s = self.settings
        return retry_policy.decide(
            job.attempt,
            job.retry_count,
            retry_policy.advice_of(payload),
            base=s.retry_backoff_base,
            cap=s.retry_backoff_cap,
            rand=self.random,
        )

    def _retry(
        self, seq: int, job: ManagedJob, payload: str, now: float, decision: retry_policy.Decision
    ) -> None:
        """A failed job with retries left: the router retries it, or we do after a back-off."""
        name, error = outcomes.parse_failure(payload)
        self.stats.retried[job.queue] += 1
        logger.warning(
            "job failed msgid=%s job=%s queue=%s attempt=%d of %d, will retry: %s: %s",
            job.msgid,
            name,
            job.queue,
            job.attempt,
            job.retry_count + 1,
            error["type"],
            error["message"],
            extra=job_fields(job.msgid, job.queue, name),
        )
        if job.record:
            self._record(job, JobStatus.RETRYING, now, error=error)
        if self._router_retries_job(job):
            # Without a policy of the job's the router's own back-off applies.
            delay = decision.delay if decision.custom else None
            self._report(job, JobStatus.RETRY, outcomes.retry_payload(job.attempt, error, delay))
            return
        delay = decision.delay
        job.attempt += 1
        job.child = None
        job.started = job.pid = None
        job.began = 0.0
        self.jobs[seq] = job  # keeps its slot while it waits
        heapq.heappush(self._retries, (now + delay, seq))

    def _skipped(self, job: ManagedJob) -> None:
        """Its child skipped it as asked."""
        if job.skip == SKIP_NACK:
            self._nack(job, "stopping")
        elif job.skip == SKIP_TIMEOUT:
            self._timed_out(job, time.monotonic())
        else:
            self._cancelled(job)

    def _expired(self, job: ManagedJob, now: float) -> None:
        """``job`` was not started before its ``expires`` time: reported expired, never run."""
        name = job_name(job.body_text)
        logger.info(
            "job expired before it started, not run msgid=%s job=%s queue=%s",
            job.msgid,
            name,
            job.queue,
            extra=job_fields(job.msgid, job.queue, name),
        )
        if job.record:
            self._record(job, JobStatus.EXPIRED, now, error=outcomes.expired_error())
        # DONE ``cancelled`` with an ``Expired`` error: the DONE words are fixed.
        self._report(job, JobStatus.CANCELLED, outcomes.expired_payload())

    def _cancelled(self, job: ManagedJob) -> None:
        if job.record:
            self._record(job, JobStatus.CANCELLED, time.monotonic())
        self._report(job, JobStatus.CANCELLED, outcomes.cancelled_payload())

    # -- records ------------------------------------------------------------------
    def _started(self, job: ManagedJob, child: Child) -> None:
        job.started = time.time()
        job.pid = child.pid
        self._add_record(job, JobStatus.RUNNING, None, time.monotonic())

    def _record(
        self,
        job: ManagedJob,
        status: JobStatus,
        now: float,
        *,
        value: object = None,
        error: dict[str, str] | None = None,
        poisoned: bool = False,
    ) -> None:
        given_up = status in (JobStatus.FAILED, JobStatus.TIMED_OUT)
        options = _sent_options(job.headers) if given_up and job.headers is not None else None
        finished = time.time()
        self._add_record(
            job, status, finished, now, value=value, error=error, options=options, poisoned=poisoned
        )

    def _add_record(
        self,
        job: ManagedJob,
        status: JobStatus,
        finished: float | None,
        now: float,
        *,
        value: object = None,
        error: dict[str, str] | None = None,
        progress: object = None,
        options: dict[str, object] | None = None,
        poisoned: bool = False,
    ) -> None:
        self.recorder.add(
            msgid=job.msgid,
            queue=job.queue,
            body_text=job.body_text,
            status=status,
            attempt=job.attempt,
            pid=job.pid,
            started=job.started if job.started is not None else finished,
            finished=finished,
            value=value,
            error=error,
            now=now,
            progress=progress,
            options=options,
            poisoned=poisoned,
        )

    # -- supervision: retries due, timeouts, children that died -----------------------------
    def due_retries(self, now: float) -> None:
        """Queue held jobs whose back-off has passed."""
        retries, jobs = self._retries, self.jobs
        while retries and retries[0][0] <= now:
            _, seq = heapq.heappop(retries)
            job = jobs.get(seq)
            if job is not None and job.child is None:
                self.pending.append(seq)

    def next_retry(self) -> float | None:
        return self._retries[0][0] if self._retries else None

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
            self._timed_out(job, now)

    def _timed_out(self, job: ManagedJob, now: float) -> None:
        if job.record:
            error = outcomes.error_info("TimeoutError", f"timeout of {job.timeout}s")
            self._record(job, JobStatus.TIMED_OUT, now, error=error)
        self._report(job, JobStatus.TIMEOUT, outcomes.timeout_payload(job.timeout))

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
                    self._timed_out(job, now)
                else:
                    self._cancelled(job)
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
                self._timed_out(job, now)
            elif job.skip == SKIP_CANCEL:
                self._cancelled(job)
            else:
                self._lost_job(job, child.pid, None, now)
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
                self._skipped(job)
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
            self._lost_job(job, item.pid, item.exitcode, now)
        self._hand_back(requeue)
        return len(lost)

    def _lost_job(self, job: ManagedJob, pid: int, exitcode: int | None, now: float) -> None:
        """``job`` was running in a process that died (or was stopped for another job)."""
        if exitcode is None:
            message = f"worker process pid={pid} was stopped running it (for another job)"
        else:
            message = f"worker process pid={pid} exited with code {exitcode} running it"
        name = job_name(job.body_text)
        logger.warning(
            "job lost msgid=%s job=%s queue=%s: %s",
            job.msgid,
            name,
            job.queue,
            message,
            extra=job_fields(job.msgid, job.queue, name),
        )
        if job.record:
            # Our router hands it out again (a new run, in another process);
            # a reference router takes the death as the job's failure.
            redelivered = self._router_retries_job(job)
            status = JobStatus.RETRYING if redelivered else JobStatus.FAILED
            error = outcomes.error_info("WorkerDied", message)
            self._record(job, status, now, error=error)
            if redelivered:
                self._keep_died(job, message)
        self._report(job, JobStatus.DIED, outcomes.error_payload("WorkerDied", message))

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
            self._cancelled(job)
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
        self._cancelled(job)

    def _keep_died(self, job: ManagedJob, message: str) -> None:
        self.died[job.msgid] = (job, message)
        self.died.move_to_end(job.msgid)
        if len(self.died) > DIED_KEPT:
            self.died.popitem(last=False)

    def set_aside(self, msgid: str, reason: str, now: float) -> None:
        """The router set aside (poisoned) a job whose worker death we reported: it will
        not run again, so its row ends ``failed`` (``WorkerDied``), not ``retrying``."""
        found = self.died.pop(msgid, None)
        if found is None:  # not recorded here, or long ago
            logger.info("the router set aside job msgid=%s: %s", msgid, reason)
            return
        job, message = found
        logger.warning(
            "job failed msgid=%s queue=%s: %s; the router set it aside (%s)",
            msgid,
            job.queue,
            message,
            reason,
            extra=job_fields(msgid, job.queue, job_name(job.body_text)),
        )
        error = outcomes.error_info("WorkerDied", f"{message}; the router set it aside ({reason})")
        self._record(job, JobStatus.FAILED, now, error=error, poisoned=True)

    def _router_retries_job(self, job: ManagedJob) -> bool:
        """The router ``job`` came from retries it (our router, DONE mode)."""
        if self._retries_for is not None:
            return self._retries_for(job)
        return self._router_retries()

    def hand_back_waiting(self, reason: str, which: Callable[[ManagedJob], bool]) -> int:
        """Give back (NACK ``reason``) the jobs no child holds, waiting for one or for
        a local retry, of those ``which`` says yes to; how many."""
        given = 0
        for seq, job in list(self.jobs.items()):
            if job.child is None and which(job):
                del self.jobs[seq]
                self._nack(job, reason)
                given += 1
        if given:
            self._drop_stale_entries()
        return given

    def _drop_stale_entries(self) -> None:
        """Keep in the pending queue and the retry heap only jobs still held."""
        jobs = self.jobs
        self.pending = deque(seq for seq in self.pending if seq in jobs)
        self._retries = [(due, seq) for due, seq in self._retries if seq in jobs]
        heapq.heapify(self._retries)

    def hand_back_unstarted(self, which: Callable[[ManagedJob], bool] | None = None) -> None:
        """Give back every job that has not started (graceful stop with our router);
        ``which``: only those it says yes to (the jobs of the groups that take them back)."""
        for seq, job in list(self.jobs.items()):
            if which is not None and not which(job):
                continue
            child = job.child
            if child is None:
                del self.jobs[seq]
                self._nack(job, "stopping")
            elif not child.runs(seq) and job.skip not in (SKIP_CANCEL, SKIP_TIMEOUT):
                if not job.skip:  # SKIP_MOVE: its cancel is on its way already
                    self.pool.cancel(child, seq)
                job.skip = SKIP_NACK
        if which is None:
            self.pending.clear()
            self._retries.clear()
        else:
            self._drop_stale_entries()


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


#: The header options a dead letter keeps, so the admin's retry sends the job as it was sent.
_KEPT_OPTIONS = ("timeout", "retry_count", "priority", "soft_timeout", "guarantee")


def _sent_options(headers: Headers) -> dict[str, object]:
    """The options of ``headers`` that differ from the defaults (worked out only for a
    job given up, not for every job received)."""
    return {name: value for name in _KEPT_OPTIONS if (value := getattr(headers, name))}
