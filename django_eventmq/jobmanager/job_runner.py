"""In a worker child: running one job, from its body to its outcome.

:class:`JobRunner` parses a job's body, checks the registry (a job that
names anything not registered with ``@job``, or in ``ALLOWED_JOB_MODULES``,
is refused and never imported or run), calls it (:mod:`.invoke`: soft time
limits, async jobs) between the hooks module's ``before_job``/``after_job``,
tells the job events (the Django signals) and encodes the outcome:
``(status, payload JSON)``. :mod:`.worker_process` runs it for each job the
job manager hands over.
"""

from __future__ import annotations

import asyncio
import importlib
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from django_eventmq.errors import InvalidJob, JobNotAllowed, SerializationError
from django_eventmq.jobmanager import invoke, progress
from django_eventmq.protocol import JobBody, encode_json, parse_job
from django_eventmq.protocol.payload import MAX_JSON_BYTES, MAX_JSON_DEPTH
from django_eventmq.protocol.status import JobStatus
from django_eventmq.runtime import job_context, job_events, registry, retry_policy, tracing


def _noop() -> None:
    return None


@dataclass(frozen=True, slots=True)
class Hooks:
    """The optional functions of a hooks module (missing ones do nothing)."""

    setup: Callable[[], object] = _noop
    before_job: Callable[[], object] = _noop
    after_job: Callable[[], object] = _noop
    #: Called with batches of outcome records; None when the module has none.
    record_results: Callable[[list[dict[str, Any]]], object] | None = None


def load_hooks(path: str | None) -> Hooks:
    """Import the hooks module at ``path`` and pick up its optional functions."""
    if not path:
        return Hooks()
    module: ModuleType = importlib.import_module(path)
    return Hooks(
        setup=getattr(module, "setup", _noop),
        before_job=getattr(module, "before_job", _noop),
        after_job=getattr(module, "after_job", _noop),
        record_results=getattr(module, "record_results", None),
    )


class JobRunner:
    """Runs job bodies: parse, check the registry, call, encode the outcome."""

    def __init__(
        self,
        allowed_modules: tuple[str, ...] = (),
        hooks: Hooks | None = None,
        *,
        max_json_depth: int = MAX_JSON_DEPTH,
        max_body_bytes: int = MAX_JSON_BYTES,
    ) -> None:
        self.allowed_modules = allowed_modules
        self.hooks = hooks or Hooks()
        #: Bounds on the body (``MAX_JSON_DEPTH`` / ``MAX_BODY_BYTES``): a body past
        #: them is refused before it is parsed further.
        self.max_json_depth = max_json_depth
        self.max_body_bytes = max_body_bytes

    def run(
        self,
        body: bytes | str,
        report: Callable[[str], object] | None = None,
        soft_timeout: float | None = None,
        context: bytes = b"",
    ) -> tuple[JobStatus, str]:
        """Run one job; returns ``(status, payload JSON)``. Never raises.

        ``report`` takes each partial the job reports (:func:`.progress.progress`,
        or each value of a generator job, whose ``return`` value is the result).
        ``soft_timeout``: seconds after which ``SoftTimeLimitExceeded`` is raised
        inside the job (:mod:`.invoke`; async jobs run there too). ``context``: the
        job's context line (``current_job()`` while it runs).
        """
        prepared = self._prepare(body, context)
        if isinstance(prepared, tuple):
            return prepared
        token = job_context.enter(prepared.running)  # current_job() while it runs
        try:
            return self._call(prepared, report, soft_timeout)
        finally:
            job_context.leave(token)

    def _call(
        self,
        prepared: _Prepared,
        report: Callable[[str], object] | None,
        soft_timeout: float | None,
    ) -> tuple[JobStatus, str]:
        job, running = prepared.job, prepared.running
        events = job_events.listener  # None: nobody listens (the Django signals)
        try:
            self.hooks.before_job()
            progress.set_reporter(report)
            try:
                if events is not None:
                    events.started(running)
                value = invoke.call(prepared.func, job.args, job.kwargs, soft_timeout)
            finally:
                progress.set_reporter(None)
                self.hooks.after_job()
        except BaseException as exc:  # a job's SystemExit must not end the child
            if isinstance(exc, GeneratorExit):
                raise
            # KeyboardInterrupt too: children ignore SIGINT, so the job raised it
            # itself; it fails that job, as any exception does, not the child.
            return _failure(prepared, exc, events)
        return _success(prepared, value, events)

    async def run_async(
        self, body: bytes | str, soft_timeout: float | None = None, context: bytes = b""
    ) -> tuple[JobStatus, str]:
        """:meth:`run` for an async job on the running event loop, beside others
        (:mod:`.tasks`). A :class:`asyncio.CancelledError` (the job manager
        cancelled it) is raised: the caller reports it. Progress goes where
        :data:`.progress.task_reporter` says, in this task's context."""
        prepared = self._prepare(body, context)
        if isinstance(prepared, tuple):
            return prepared
        job, running = prepared.job, prepared.running
        events = job_events.listener
        # current_job(): set in this task's own context, so each job beside it
        # sees its own.
        token = job_context.enter(running)
        try:
            try:
                self.hooks.before_job()
                try:
                    if events is not None:
                        events.started(running)
                    value = await invoke.call_async(
                        prepared.func, job.args, job.kwargs, soft_timeout
                    )
                finally:
                    self.hooks.after_job()
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                if isinstance(exc, GeneratorExit):
                    raise
                return _failure(prepared, exc, events)
            return _success(prepared, value, events)
        finally:
            job_context.leave(token)

    def _prepare(self, body: bytes | str, context: bytes) -> _Prepared | tuple[JobStatus, str]:
        """The job ``body`` names, ready to call, or why it is not run."""
        name = "?"
        try:
            job = parse_job(body, max_depth=self.max_json_depth, max_bytes=self.max_body_bytes)
            name = job.name
            tracing.job_named(name)
            func = registry.resolve(job, self.allowed_modules)
        except (InvalidJob, JobNotAllowed) as exc:
            # Not run: the router's port must not be a remote code execution port.
            return JobStatus.REFUSED, _error_payload(name, exc, with_traceback=False)
        except Exception as exc:  # JobNotFound, or a class constructor that raised
            return JobStatus.FAILED, _error_payload(name, exc)
        return _Prepared(job, func, job_context.Running(context, job))


@dataclass(frozen=True, slots=True)
class _Prepared:
    job: JobBody
    func: Callable[..., Any]
    #: What current_job() gives while it runs, and what the signals carry.
    running: job_context.Running


def _failure(
    prepared: _Prepared, exc: BaseException, events: job_events.Listener | None
) -> tuple[JobStatus, str]:
    """A job that raised ``exc``: failed, with its retry policy's advice (known here
    only); ``events`` hear it failed for good or is to be retried (the job manager
    decides the same way, from the same advice: retry_policy.given_up)."""
    name = prepared.job.name
    advice = retry_policy.advice(name, exc, time.time())
    if events is not None:
        _failed(events, prepared.running, exc, advice)
    return JobStatus.FAILED, _error_payload(name, exc, retry=advice)


def _success(
    prepared: _Prepared, value: Any, events: job_events.Listener | None
) -> tuple[JobStatus, str]:
    name = prepared.job.name
    try:
        payload = encode_json({"value": value})
    except SerializationError as exc:
        error = SerializationError(f"return value of {name} is not JSON-serialisable: {exc}")
        if events is not None:
            _failed(events, prepared.running, error, {})
        return JobStatus.FAILED, _error_payload(name, error, with_traceback=False)
    if events is not None:
        events.succeeded(prepared.running, value)
    return JobStatus.OK, payload


def _failed(
    events: job_events.Listener,
    running: job_context.Running,
    exc: BaseException,
    advice: dict[str, Any],
) -> None:
    """Tell ``events`` the job failed: for good, or to be retried."""
    context = running.context()
    retry_count = context.headers.retry_count
    if retry_policy.given_up(context.attempt, retry_count, advice):
        events.failed(running, exc)
    else:
        events.retrying(running, exc)


def _error_payload(
    name: str,
    exc: BaseException,
    *,
    with_traceback: bool = True,
    retry: dict[str, Any] | None = None,
) -> str:
    text = "".join(traceback.format_exception(exc)) if with_traceback else ""
    kind = type(exc)
    tracing.job_failed(exc)  # its run span, if traced
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
