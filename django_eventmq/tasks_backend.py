"""A Django Tasks backend (Django >= 6.0) that runs tasks on EventMQ job managers.

::

    TASKS = {"default": {"BACKEND": "django_eventmq.tasks_backend.EventMQBackend",
                         "QUEUES": ["default", "email"]}}

``task.enqueue()`` sends a REQUEST for the dispatcher job
:func:`django_eventmq.tasks_runner.run_task`, which runs the task in a worker.
The task's priority becomes the ``priority`` header (handed out first within
a queue), ``run_after`` the ``delay-until`` header (held by the router until
due). Results come from the results table: the backend writes the
``queued`` row, job managers the rest (the request asks for a reply, so its
outcome is recorded).
"""

from __future__ import annotations

import re
from typing import Any

from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task, TaskError, TaskResult, TaskResultStatus
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone
from django.utils.module_loading import import_string

from . import results
from .protocol import Headers, new_msgid
from .results_models import JobResult, JobStatus

_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")

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


class EventMQBackend(BaseTaskBackend):
    """Enqueues Django tasks over eMQP; EventMQ job managers run them."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def validate_task(self, task: Task) -> None:
        super().validate_task(task)
        if not _QUEUE_NAME.match(task.queue_name):
            raise InvalidTask(
                f"queue name {task.queue_name!r} may only hold letters, digits, '_', '.' and '-'"
            )

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        from .tasks_runner import run_task

        self.validate_task(task)
        task_id = new_msgid()
        now = timezone.now()
        result = TaskResult(
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
            priority=int(task.priority),
            delay_until=task.run_after.timestamp() if task.run_after is not None else None,
        )
        # The row first: a worker's record of the run then only moves it on.
        results.record_queued(
            task_id,
            queue=task.queue_name,
            job=task.module_path,
            args=result.args,
            kwargs=result.kwargs,
        )
        run_task.send(
            (task.module_path, result.args, result.kwargs, self.alias, task_id, now.timestamp()),
            queue=task.queue_name,
            headers=headers,
            msgid=task_id,
        )
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        row = JobResult.objects.filter(msgid=result_id).first()
        if row is None:
            raise TaskResultDoesNotExist(result_id)
        return self.result_from_row(row)

    def result_from_row(self, row: JobResult) -> TaskResult:
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
                    exception_class_path=row.exc_type or results.error_of(row).exc_type,
                    traceback=row.traceback,
                )
            )
        worker = f"{row.jobmanager}:{row.pid}" if row.jobmanager else ""
        result = TaskResult(
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
            worker_ids=[worker] * max(row.attempts, 0) if worker else [],
        )
        if status == TaskResultStatus.SUCCESSFUL:
            object.__setattr__(result, "_return_value", row.value)
        return result
