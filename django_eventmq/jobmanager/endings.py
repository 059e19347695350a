"""Every outcome of a job's run in the job manager, in one place.

:meth:`Endings.finish` reads what a child said of each job it ran; the
lifecycle calls the others when a job ends outside its child (expired before
it started, timed out, cancelled, lost with its worker, refused by
``QUEUE_ALLOWED_JOBS``). The outcomes, one method each:

==================  =========================================  ===============
outcome             when                                       DONE status
==================  =========================================  ===============
:meth:`succeeded`   the job returned                           ``ok``
:meth:`retrying`    it failed and a ``failing`` stage (the     ``retry`` (or
                    retry decision, :mod:`.retries`) says it   held here)
                    runs again
:meth:`failed`      it failed for good, or was refused         ``failed`` /
                                                               ``refused``
:meth:`skipped`     its child skipped it as asked (cancel,     (as asked)
                    NACK, an async job's timeout)
:meth:`cancelled`   the router cancelled it                    ``cancelled``
:meth:`expired`     not started before its ``expires`` time    ``cancelled``
:meth:`timed_out`   it ran past its ``timeout``                ``timeout``
:meth:`lost`        its worker process died under it           ``died``
:meth:`set_aside`   the router poisoned a job that died here   (none)
==================  =========================================  ===============

Each outcome is logged, passed to the job's ``ended`` stages (:mod:`.stages`:
its records, for a recorded job) and reported after its ``reporting`` stages
(its last partial); what a stage needs that costs (a value decoded, an
error made) is made only when the job has one. How the router hears of it
is the job manager's choice (the ``report`` callback: DONE, or REPLY + READY).
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable

from django_eventmq.jobmanager import outcomes, retries
from django_eventmq.jobmanager.managed_job import SKIP_MOVE, SKIP_NACK, SKIP_TIMEOUT, ManagedJob
from django_eventmq.protocol.status import NOT_RUN, JobStatus
from django_eventmq.runtime.logs import job_debug, job_fields, job_name
from django_eventmq.runtime.stats import Stats

logger = logging.getLogger("django_eventmq.jobmanager")

#: Recorded jobs whose worker process died, kept (the latest) until the router says
#: whether it set one aside (:meth:`Endings.set_aside`); it says so right away.
DIED_KEPT = 1000

#: Reports a job's outcome: ``(job, DONE status, reply payload)``.
Report = Callable[[ManagedJob, JobStatus, str], None]
#: Hands a job back unrun, with the reason (the job manager sends a NACK, or
#: READY to a reference router). Not named ``Nack``: that is the protocol message.
HandBack = Callable[[ManagedJob, str], None]


class Endings:
    """The outcomes of the jobs of one job manager."""

    def __init__(
        self,
        jobs: dict[int, ManagedJob],
        stats: Stats,
        local_retries: retries.LocalRetries,
        *,
        report: Report,
        nack: HandBack,
        router_retries: Callable[[ManagedJob], bool],
    ) -> None:
        #: The jobs held (the lifecycle's): a job retried here goes back in.
        self.jobs = jobs
        #: Outcomes counted and runs timed, for metrics.
        self.stats = stats
        self.local_retries = local_retries
        self._send = report
        self.nack = nack
        #: Whether the router ``job`` came from retries it (DONE mode).
        self.router_retries = router_retries
        #: Jobs with ``set_aside`` stages whose worker died (recorded ``retrying``, as
        #: the router hands them out again), until the router says it set one aside.
        self.died: OrderedDict[str, tuple[ManagedJob, str]] = OrderedDict()

    # -- what a child said -----------------------------------------------------------
    def finish(self, results: list[tuple[int, str, str]], now: float) -> list[int]:
        """Settle each job a child finished (``(seq, child status, payload)``); the
        seqs of those not over (taken back for a new child), to queue again."""
        jobs = self.jobs
        moved: list[int] = []
        for seq, status, payload in results:
            job = jobs.pop(seq, None)
            if job is None:
                continue
            if status == JobStatus.OK:
                self.succeeded(job, payload, now)
            elif status == JobStatus.CANCELLED:
                if job.skip == SKIP_MOVE:
                    jobs[seq] = job  # not over: it waits for a new child
                    moved.append(seq)
                else:
                    self.skipped(job)
            elif status == JobStatus.FAILED and (retry := _retry(job, payload)):
                self.retrying(seq, job, payload, now, retry)
            else:
                self.failed(job, status, payload, now)
        return moved

    # -- the outcomes -------------------------------------------------------------------
    def succeeded(self, job: ManagedJob, payload: str, now: float) -> None:
        if ended := job.plan.ended:
            value = json.loads(payload).get("value")
            for hook in ended:
                hook(job, JobStatus.SUCCEEDED, now, value, None)
        self._report(job, JobStatus.OK, payload)

    def retrying(
        self, seq: int, job: ManagedJob, payload: str, now: float, retry: retries.Retry
    ) -> None:
        """A failed job with retries left: the router retries it, or it waits here."""
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
        for hook in job.plan.ended:
            hook(job, JobStatus.RETRYING, now, None, error)
        if retry.by_router:
            self._report(
                job, JobStatus.RETRY, outcomes.retry_payload(job.attempt, error, retry.delay)
            )
            return
        job.attempt += 1
        job.child = None
        job.started = job.pid = None
        job.began = 0.0
        self.jobs[seq] = job  # keeps its slot while it waits
        self.local_retries.hold(seq, now + (retry.delay or 0.0))

    def failed(self, job: ManagedJob, status: str, payload: str, now: float) -> None:
        """It failed for good (``failed``), or was not run (``refused``)."""
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
        for hook in job.plan.ended:
            hook(job, JobStatus.FAILED, now, None, error)
        done = JobStatus.REFUSED if status == JobStatus.REFUSED else JobStatus.FAILED
        self._report(
            job, done, outcomes.error_payload(error["type"], error["message"], error["traceback"])
        )

    def refuse(self, job: ManagedJob, name: str, reason: str, now: float) -> None:
        """Answer a job that is not held (nor run) with ``refused``, as a child would."""
        detail = {"job": name, "type": "JobNotAllowed", "message": reason, "traceback": ""}
        self.failed(job, JobStatus.REFUSED, json.dumps(detail), now)

    def skipped(self, job: ManagedJob) -> None:
        """Its child skipped it as asked."""
        if job.skip == SKIP_NACK:
            self.nack(job, "stopping")
        elif job.skip == SKIP_TIMEOUT:
            self.timed_out(job, time.monotonic())
        else:
            self.cancelled(job)

    def cancelled(self, job: ManagedJob) -> None:
        if ended := job.plan.ended:
            now = time.monotonic()
            for hook in ended:
                hook(job, JobStatus.CANCELLED, now, None, None)
        self._report(job, JobStatus.CANCELLED, outcomes.cancelled_payload())

    def expired(self, job: ManagedJob, now: float) -> None:
        """``job`` was not started before its ``expires`` time: reported expired, never run."""
        name = job_name(job.body_text)
        logger.info(
            "job expired before it started, not run msgid=%s job=%s queue=%s",
            job.msgid,
            name,
            job.queue,
            extra=job_fields(job.msgid, job.queue, name),
        )
        if ended := job.plan.ended:
            error = outcomes.expired_error()
            for hook in ended:
                hook(job, JobStatus.EXPIRED, now, None, error)
        # DONE ``cancelled`` with an ``Expired`` error: the DONE words are fixed.
        self._report(job, JobStatus.CANCELLED, outcomes.expired_payload())

    def timed_out(self, job: ManagedJob, now: float) -> None:
        if ended := job.plan.ended:
            error = outcomes.error_info("TimeoutError", f"timeout of {job.timeout}s")
            for hook in ended:
                hook(job, JobStatus.TIMED_OUT, now, None, error)
        self._report(job, JobStatus.TIMEOUT, outcomes.timeout_payload(job.timeout))

    def lost(self, job: ManagedJob, pid: int, exitcode: int | None, now: float) -> None:
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
        plan = job.plan
        if plan.ended or plan.set_aside:
            # Our router hands it out again (a new run, in another process);
            # a reference router takes the death as the job's failure.
            redelivered = self.router_retries(job)
            status = JobStatus.RETRYING if redelivered else JobStatus.FAILED
            error = outcomes.error_info("WorkerDied", message)
            for hook in plan.ended:
                hook(job, status, now, None, error)
            if redelivered and plan.set_aside:
                self._keep_died(job, message)
        self._report(job, JobStatus.DIED, outcomes.error_payload("WorkerDied", message))

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
        for hook in job.plan.set_aside:
            hook(job, error, now)

    # -- helpers ------------------------------------------------------------------------
    def _keep_died(self, job: ManagedJob, message: str) -> None:
        self.died[job.msgid] = (job, message)
        self.died.move_to_end(job.msgid)
        if len(self.died) > DIED_KEPT:
            self.died.popitem(last=False)

    def _report(self, job: ManagedJob, status: JobStatus, payload: str) -> None:
        """Count the outcome and time the run, send the job's held partial, then report."""
        if status != JobStatus.RETRY:  # a retry is counted by retrying(): the job goes on
            ran: float | None = None  # refused or cancelled: not timed
            if job.began:
                ran = time.monotonic() - job.began
            elif job.child is not None and status not in NOT_RUN:
                ran = 0.0  # not seen running: it ran between two reads of its child
            self.stats.finish(job.queue, status, ran)
            job_debug(logger, "%s", job.msgid, job.queue, status, body=job.body_text)
        if reporting := job.plan.reporting:  # its last partial: the outcome comes after
            for hook in reporting:
                hook(job)
        self._send(job, status, payload)


def _retry(job: ManagedJob, payload: str) -> retries.Retry | None:
    """The retry a ``failing`` stage of ``job`` asks for (None: it failed for good)."""
    for failing in job.plan.failing:
        retry = failing(job, payload)
        if retry is not None:
            return retry
    return None
