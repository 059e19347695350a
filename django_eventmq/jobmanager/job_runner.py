"""In a worker child: running one job, from its body to its outcome.

:class:`JobRunner` parses a job's body, checks the registry (a job that
names anything not registered with ``@job``, or in ``ALLOWED_JOB_MODULES``,
is refused and never imported or run), calls it (:mod:`.invoke`: soft time
limits, async jobs) and encodes the outcome: ``(status, payload JSON)``. The
features on a run (the job signals, the hooks module's ``before_job`` /
``after_job``, a traced job's run span) are run stages (:mod:`.run_stages`),
listed in :func:`run_stages`: the runner calls those registered at each
point and names none. :mod:`.worker_process` runs it for each job the job
manager hands over.
"""

from __future__ import annotations

import asyncio
import time
import traceback
import weakref
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from django_eventmq.errors import InvalidJob, JobNotAllowed, SerializationError
from django_eventmq.jobmanager import invoke, progress
from django_eventmq.jobmanager.job_hooks import Hooks
from django_eventmq.jobmanager.job_signals import JobSignals
from django_eventmq.jobmanager.run_span import RunSpan
from django_eventmq.jobmanager.run_stages import RunPlan, RunStage, plans
from django_eventmq.protocol import JobBody, encode_json, parse_job
from django_eventmq.protocol.payload import MAX_JSON_BYTES, MAX_JSON_DEPTH
from django_eventmq.protocol.status import JobStatus
from django_eventmq.runtime import job_context, job_events, registry, retry_policy


def run_stages(hooks: Hooks) -> list[RunStage]:
    """The run stages of a child, in the order they act at each point (a new feature:
    a module with a RunStage, and a line here)."""
    stages: list[RunStage] = []
    if (around := hooks.around()) is not None:
        stages.append(around)
    stages.append(JobSignals())
    stages.append(RunSpan())
    return stages


class JobRunner:
    """Runs job bodies: parse, check the registry, call, encode the outcome."""

    def __init__(
        self,
        allowed_modules: tuple[str, ...] = (),
        hooks: Hooks | None = None,
        *,
        max_json_depth: int = MAX_JSON_DEPTH,
        max_body_bytes: int = MAX_JSON_BYTES,
        stages: tuple[RunStage, ...] = (),
    ) -> None:
        self.allowed_modules = allowed_modules
        self.hooks = hooks or Hooks()
        #: Bounds on the body (``MAX_JSON_DEPTH`` / ``MAX_BODY_BYTES``): a body past
        #: them is refused before it is parsed further.
        self.max_json_depth = max_json_depth
        self.max_body_bytes = max_body_bytes
        #: The run stages (``stages``: more, after the child's own).
        self.stages = (*run_stages(self.hooks), *stages)
        self._plain, self._traced = plans(self.stages)
        # A listener installed later (a job module connecting a receiver) is heard.
        job_events.watch(weakref.WeakMethod(self.replan))

    def replan(self) -> None:
        """Make the plans again (a stage now wants, or no longer wants, the runs)."""
        self._plain, self._traced = plans(self.stages)

    def run(
        self,
        body: bytes | str,
        report: Callable[[str], object] | None = None,
        soft_timeout: float | None = None,
        context: bytes = b"",
        trace: bytes = b"",
    ) -> tuple[JobStatus, str]:
        """Run one job; returns ``(status, payload JSON)``. Never raises.

        ``report`` takes each partial the job reports (:func:`.progress.progress`,
        or each value of a generator job, whose ``return`` value is the result).
        ``soft_timeout``: seconds after which ``SoftTimeLimitExceeded`` is raised
        inside the job (:mod:`.invoke`; async jobs run there too). ``context``: the
        job's context line (``current_job()`` while it runs). ``trace``: its trace
        carrier (b"": untraced).
        """
        if trace:
            plan = self._traced
            with ExitStack() as around:  # a traced job's run span
                for stage in plan.around:
                    around.enter_context(stage(trace))
                return self._run(plan, body, report, soft_timeout, context)
        return self._run(self._plain, body, report, soft_timeout, context)

    def _run(
        self,
        plan: RunPlan,
        body: bytes | str,
        report: Callable[[str], object] | None,
        soft_timeout: float | None,
        context: bytes,
    ) -> tuple[JobStatus, str]:
        prepared = self._prepare(plan, body, context)
        if isinstance(prepared, tuple):
            return prepared
        job, running = prepared.job, prepared.running
        token = job_context.enter(running)  # current_job() while it runs
        try:
            try:
                if plan.before:  # a test costs less than a loop over nothing
                    for hook in plan.before:
                        hook(running)
                progress.set_reporter(report)
                try:
                    value = invoke.call(prepared.func, job.args, job.kwargs, soft_timeout)
                finally:
                    progress.set_reporter(None)
                    if plan.after:
                        for after in plan.after:
                            after(running)
            except BaseException as exc:  # a job's SystemExit must not end the child
                if isinstance(exc, GeneratorExit):
                    raise
                # KeyboardInterrupt too: children ignore SIGINT, so the job raised it
                # itself; it fails that job, as any exception does, not the child.
                return _failure(plan, prepared, exc)
            return _success(plan, prepared, value)
        finally:
            job_context.leave(token)

    async def run_async(
        self,
        body: bytes | str,
        soft_timeout: float | None = None,
        context: bytes = b"",
        trace: bytes = b"",
    ) -> tuple[JobStatus, str]:
        """:meth:`run` for an async job on the running event loop, beside others
        (:mod:`.tasks`). A :class:`asyncio.CancelledError` (the job manager
        cancelled it) is raised: the caller reports it. Progress goes where
        :data:`.progress.task_reporter` says, in this task's context."""
        if trace:
            plan = self._traced
            with ExitStack() as around:
                for stage in plan.around:
                    around.enter_context(stage(trace))
                return await self._run_async(plan, body, soft_timeout, context)
        return await self._run_async(self._plain, body, soft_timeout, context)

    async def _run_async(
        self, plan: RunPlan, body: bytes | str, soft_timeout: float | None, context: bytes
    ) -> tuple[JobStatus, str]:
        prepared = self._prepare(plan, body, context)
        if isinstance(prepared, tuple):
            return prepared
        job, running = prepared.job, prepared.running
        # current_job(): set in this task's own context, so each job beside it
        # sees its own.
        token = job_context.enter(running)
        try:
            try:
                if plan.before:
                    for hook in plan.before:
                        hook(running)
                try:
                    value = await invoke.call_async(
                        prepared.func, job.args, job.kwargs, soft_timeout
                    )
                finally:
                    if plan.after:
                        for after in plan.after:
                            after(running)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                if isinstance(exc, GeneratorExit):
                    raise
                return _failure(plan, prepared, exc)
            return _success(plan, prepared, value)
        finally:
            job_context.leave(token)

    def _prepare(
        self, plan: RunPlan, body: bytes | str, context: bytes
    ) -> _Prepared | tuple[JobStatus, str]:
        """The job ``body`` names, ready to call, or why it is not run."""
        name = "?"
        try:
            job = parse_job(body, max_depth=self.max_json_depth, max_bytes=self.max_body_bytes)
            name = job.name
            if plan.named:
                for named in plan.named:
                    named(name)
            func = registry.resolve(job, self.allowed_modules)
        except (InvalidJob, JobNotAllowed) as exc:
            # Not run: the router's port must not be a remote code execution port.
            return JobStatus.REFUSED, _error_payload(plan, name, exc, with_traceback=False)
        except Exception as exc:  # JobNotFound, or a class constructor that raised
            return JobStatus.FAILED, _error_payload(plan, name, exc)
        return _Prepared(job, func, job_context.Running(context, job))


@dataclass(frozen=True, slots=True)
class _Prepared:
    job: JobBody
    func: Callable[..., Any]
    #: What current_job() gives while it runs, and what the signals carry.
    running: job_context.Running


def _failure(plan: RunPlan, prepared: _Prepared, exc: BaseException) -> tuple[JobStatus, str]:
    """A job that raised ``exc``: failed, with its retry policy's advice (known here
    only, passed to the ``failed`` stages and on to the job manager)."""
    name = prepared.job.name
    advice = retry_policy.advice(name, exc, time.time())
    for failed in plan.failed:
        failed(prepared.running, exc, advice)
    return JobStatus.FAILED, _error_payload(plan, name, exc, retry=advice)


def _success(plan: RunPlan, prepared: _Prepared, value: Any) -> tuple[JobStatus, str]:
    name = prepared.job.name
    try:
        payload = encode_json({"value": value})
    except SerializationError as exc:
        error = SerializationError(f"return value of {name} is not JSON-serialisable: {exc}")
        for failed in plan.failed:
            failed(prepared.running, error, {})
        return JobStatus.FAILED, _error_payload(plan, name, error, with_traceback=False)
    if plan.succeeded:
        for succeeded in plan.succeeded:
            succeeded(prepared.running, value)
    return JobStatus.OK, payload


def _error_payload(
    plan: RunPlan,
    name: str,
    exc: BaseException,
    *,
    with_traceback: bool = True,
    retry: dict[str, Any] | None = None,
) -> str:
    text = "".join(traceback.format_exception(exc)) if with_traceback else ""
    kind = type(exc)
    for error in plan.error:  # its run span, if traced
        error(exc)
    fields: dict[str, Any] = {
        "job": name,
        "type": kind.__name__,
        # The importable class (a Django task's TaskError.exception_class_path).
        "path": f"{kind.__module__}.{kind.__qualname__}",
        "message": str(exc),
        "traceback": text,
    }
    if retry:
        fields[retry_policy.ADVICE_KEY] = retry  # runtime/retry_policy.py: advice
    return encode_json(fields)
