"""A Django Tasks backend (Django >= 6.0) that runs tasks on EventMQ job managers.

::

    TASKS = {"default": {"BACKEND": "django_eventmq.tasks_backend.EventMQBackend",
                         "QUEUES": ["default", "email"]}}

``task.enqueue()`` sends a REQUEST for the dispatcher job :func:`run_task`
(below), which runs the task in a worker.
The task's priority becomes the ``priority`` header (handed out first within
a queue), ``run_after`` the ``delay-until`` header (held by the router until
due), set by ``Job.send(eta=...)`` as for any job. Results come from the
results table: the backend writes the ``queued`` row, job managers the rest
(the request asks for a reply, so its outcome is recorded).

``OPTIONS``: ``GUARANTEE`` (bool, default True): ``enqueue()`` returns once
the router has stored the task (its ACK), as ``@job(guarantee=True)`` does,
and raises :class:`~django_eventmq.errors.BrokerUnavailable` otherwise; the
task's ``queued`` row is then removed, so no READY row waits for a task that
was never stored.

Task functions are not ``@job``\\s, so the backend sends one registered
dispatcher job, :func:`~django_eventmq.tasks_runner.run_task`, naming the
task by its ``module_path``. This module is the web side (enqueueing, reading
results); what runs in the worker is :mod:`.tasks_runner`.
"""

from __future__ import annotations

import builtins
import re
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.core import checks
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task, TaskError, TaskResult, TaskResultStatus
from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone
from django.utils.module_loading import import_string

from django_eventmq import result_recording, results
from django_eventmq.models.results import JobResult, JobStatus
from django_eventmq.protocol import Headers, new_msgid

#: The dispatcher job's name, ``django_eventmq.tasks_runner.run_task``: the
#: name every release sent on the wire, and where it lives again
#: (:mod:`.tasks_runner`). The release that kept it in this module registered
#: it as ``django_eventmq.tasks_backend.run_task``, which
#: :data:`django_eventmq.runtime.registry.ALIASES` still resolves.
RUNNER_PATH = "django_eventmq.tasks_runner"
RUNNER_CALLABLE = "run_task"

if TYPE_CHECKING:  # not subscriptable at run time
    #: Tasks of any signature, and their results (the backend passes them on).
    AnyTask = Task[..., Any]
    AnyResult = TaskResult[Any, Any]

_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")

#: ``OPTIONS`` this backend reads: name -> (type, default).
OPTIONS: dict[str, tuple[type, Any]] = {"GUARANTEE": (bool, True)}

#: Our statuses as Django's.
STATUS_MAP = {
    JobStatus.QUEUED: TaskResultStatus.READY,
    JobStatus.RETRYING: TaskResultStatus.READY,
    JobStatus.RUNNING: TaskResultStatus.RUNNING,
    JobStatus.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    JobStatus.FAILED: TaskResultStatus.FAILED,
    JobStatus.TIMED_OUT: TaskResultStatus.FAILED,
    JobStatus.CANCELLED: TaskResultStatus.FAILED,
}


class WorkerDied(Exception):
    """The worker process running the task exited (its job manager recorded it)."""


class TaskCancelled(Exception):
    """The task was cancelled (``exception_class`` of a cancelled task's error)."""


#: Errors a job manager records by a bare name: the classes that stand for them here.
_JOB_MANAGER_ERRORS: dict[str, type[Exception]] = {
    "WorkerDied": WorkerDied,
    "Cancelled": TaskCancelled,
}


class EventMQBackend(BaseTaskBackend):
    """Enqueues Django tasks over eMQP; EventMQ job managers run them."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        #: enqueue() returns once the router stored the task (OPTIONS["GUARANTEE"]).
        self.guarantee: bool = _options(alias, self.options)["GUARANTEE"]

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        errors = list(super().check(**kwargs))
        if not apps.is_installed("django_eventmq"):
            errors.append(
                checks.Error(
                    f"TASKS[{self.alias!r}] uses {type(self).__module__}.{type(self).__name__}, "
                    "but django_eventmq is not in INSTALLED_APPS: the task results table "
                    "it writes and reads does not exist",
                    hint='Add "django_eventmq" to INSTALLED_APPS and run migrate.',
                    id="django_eventmq.E010",
                )
            )
        return errors

    def validate_task(self, task: AnyTask) -> None:
        super().validate_task(task)
        if not _QUEUE_NAME.match(task.queue_name):
            raise InvalidTask(
                f"queue name {task.queue_name!r} may only hold letters, digits, '_', '.' and '-'"
            )

    def enqueue(self, task: AnyTask, args: Any, kwargs: Any) -> AnyResult:
        self.validate_task(task)
        task_id = new_msgid()
        now = timezone.now()
        result: AnyResult = TaskResult(
            task=task,
            id=task_id,
            status=TaskResultStatus.READY,
            enqueued_at=now,
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        headers = Headers(
            reply_requested=True,  # so that job managers record the outcome
            guarantee=self.guarantee,
            priority=int(task.priority),
        )
        # The row first: a worker's record of the run then only moves it on.
        # It carries the result's own enqueued_at, so get_result() matches it.
        result_recording.record_queued(
            task_id,
            queue=task.queue_name,
            job=task.module_path,
            args=result.args,
            kwargs=result.kwargs,
            enqueued=now,
        )
        # The dispatcher job is this web process's handle to send it with (as any
        # job's module is); loaded on the first enqueue, not by a worker's import.
        from django_eventmq.tasks_runner import run_task

        try:
            run_task.send(
                (
                    task.module_path,
                    result.args,
                    result.kwargs,
                    self.alias,
                    task_id,
                    now.timestamp(),
                ),
                queue=task.queue_name,
                headers=headers,
                msgid=task_id,
                eta=task.run_after,  # the delay-until header, as Job.send(eta=...) sets it
            )
        except BaseException:
            # Not stored by the router (BrokerUnavailable), or not even sent: no
            # READY row may wait for it. A row a job manager wrote meanwhile stays.
            result_recording.forget_queued(task_id)
            raise
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> AnyResult:
        row = JobResult.objects.filter(msgid=result_id).first()
        if row is None:
            raise TaskResultDoesNotExist(result_id)
        return self.result_from_row(row)

    def result_from_row(self, row: JobResult) -> AnyResult:
        """The :class:`TaskResult` a results-table row describes."""
        try:
            task = import_string(row.job)
        except ImportError as exc:
            raise TaskResultDoesNotExist(f"{row.msgid}: task {row.job!r} not found") from exc
        if not isinstance(task, Task):
            raise TaskResultDoesNotExist(f"{row.msgid}: {row.job!r} is not a task")
        status = STATUS_MAP[JobStatus(row.status)]
        errors = []
        if status == TaskResultStatus.FAILED:
            errors.append(
                TaskError(
                    exception_class_path=exception_path(
                        row.exc_type or results.error_of(row).exc_type
                    ),
                    traceback=row.traceback,
                )
            )
        result: AnyResult = TaskResult(
            task=task,
            id=row.msgid,
            status=status,
            enqueued_at=row.enqueued,
            started_at=row.started,
            last_attempted_at=row.started,
            finished_at=row.finished,
            args=row.args,
            kwargs=row.kwargs,
            backend=self.alias,
            errors=errors,
            worker_ids=worker_ids(row),
        )
        if status == TaskResultStatus.SUCCESSFUL:
            object.__setattr__(result, "_return_value", row.value)
        return result


def worker_ids(row: JobResult) -> list[str]:
    """One worker process per attempt, as Django counts attempts (``len(worker_ids)``).

    ``workers`` lists each run's process, a run handed out again after its
    process or job manager died included; a retry the job manager ran in the
    same process is that process again.
    """
    runs = list(row.workers or [])
    if not runs and row.jobmanager and row.pid is not None:
        runs = [f"{row.jobmanager}:{row.pid}"]  # a row from before the workers column
    if runs and row.attempts > len(runs):
        runs += [runs[-1]] * (row.attempts - len(runs))
    return runs


def _options(alias: str, options: Any) -> dict[str, Any]:
    """``OPTIONS`` with defaults filled in; :class:`InvalidTaskBackend` naming what is wrong."""
    valid = ", ".join(f"{name} ({kind.__name__})" for name, (kind, _) in OPTIONS.items())
    if not isinstance(options, dict):
        raise InvalidTaskBackend(
            f"TASKS[{alias!r}]['OPTIONS'] must be a dict, got {type(options).__name__}; "
            f"valid keys: {valid}"
        )
    unknown = sorted(set(options) - set(OPTIONS), key=str)
    if unknown:
        raise InvalidTaskBackend(
            f"TASKS[{alias!r}]['OPTIONS'] has unknown key(s) {', '.join(map(repr, unknown))} "
            f"for EventMQBackend; valid keys: {valid}"
        )
    found = {}
    for name, (kind, default) in OPTIONS.items():
        value = options.get(name, default)
        if type(value) is not kind:
            raise InvalidTaskBackend(
                f"TASKS[{alias!r}]['OPTIONS'][{name!r}] must be a {kind.__name__}, got {value!r}"
            )
        found[name] = value
    return found


def exception_path(exc_type: str) -> str:
    """Django's ``exception_class_path`` for a recorded exception class.

    Workers record a task's exception as ``module.qualname``; a bare name
    (rows from before that, or a job manager's own ``WorkerDied``,
    ``TimeoutError``, ``Cancelled``) is a built-in one if there is one by that
    name, one of :data:`_JOB_MANAGER_ERRORS`, else it is kept as it is.
    """
    if "." in exc_type:
        return exc_type
    if exc_type in _JOB_MANAGER_ERRORS:
        return f"{__name__}.{_JOB_MANAGER_ERRORS[exc_type].__qualname__}"
    found = getattr(builtins, exc_type, None)
    if isinstance(found, type) and issubclass(found, BaseException):
        return f"builtins.{exc_type}"
    return exc_type
