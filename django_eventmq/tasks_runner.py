"""The Django Tasks backend's side in the worker: the dispatcher job, :func:`run_task`.

Task functions are not ``@job``\\s, so the backend
(:class:`~django_eventmq.tasks_backend.EventMQBackend`) sends this one
registered job, naming the task by its ``module_path``. It runs the task only
if that path is a :class:`django.tasks.Task` in a module the worker already
imported (apps' ``tasks`` modules, ``JOB_MODULES``): a message can never
make a worker import a module or call an arbitrary function. It sends
Django's ``task_started`` and ``task_finished`` signals around the call, in
the worker, as Django's own backends do (their sender is the backend class).

Its name on the wire, ``django_eventmq.tasks_runner.run_task``, is the one
every release sent, so job managers of any release run it; it must not move
without an alias in ``runtime/registry.py: ALIASES``.
"""

from __future__ import annotations

import os
import socket
import sys
import traceback
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
from django.tasks.signals import task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import autodiscover_modules

from django_eventmq.client.jobs import job
from django_eventmq.errors import JobNotAllowed
from django_eventmq.tasks_backend import EventMQBackend

if TYPE_CHECKING:  # not subscriptable at run time
    from django_eventmq.tasks_backend import AnyResult, AnyTask


def discover_tasks() -> None:
    """Import every installed app's ``tasks`` module (so its tasks may run here)."""
    autodiscover_modules("tasks")


def find_task(module_path: str) -> AnyTask:
    """The :class:`django.tasks.Task` at ``module_path``; :class:`JobNotAllowed` otherwise.

    Only modules already imported are looked in: the message does not get to
    choose what this process imports.
    """
    module_name, _, name = module_path.rpartition(".")
    module = sys.modules.get(module_name)
    found = getattr(module, name, None) if module is not None and name else None
    if not isinstance(found, Task):
        raise JobNotAllowed(
            f"{module_path!r} is not a Django task in a module this worker imported "
            "(an app's tasks.py or JOB_MODULES); refusing to run it"
        )
    return found


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@job
def run_task(
    module_path: str,
    args: list[Any],
    kwargs: dict[str, Any],
    backend: str = "default",
    task_id: str = "",
    enqueued_at: float | None = None,
) -> Any:
    """Run the Django task at ``module_path``; returns its (JSON-normalised) value."""
    task = find_task(module_path)
    started = timezone.now()
    result: AnyResult = TaskResult(
        task=task,
        id=task_id,
        status=TaskResultStatus.RUNNING,
        enqueued_at=_when(enqueued_at),
        started_at=started,
        last_attempted_at=started,
        finished_at=None,
        args=args,
        kwargs=kwargs,
        backend=backend,
        errors=[],
        worker_ids=[worker_id()],
    )
    task_started.send(sender=EventMQBackend, task_result=result)
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *args, **kwargs)
        else:
            value = task.call(*args, **kwargs)
        value = normalize_json(value)
    except BaseException as exc:
        # KeyboardInterrupt included: no one at a terminal is stopping a worker
        # (children ignore SIGINT), the task raised it; it fails with that class.
        kind = type(exc)
        result.errors.append(
            TaskError(
                exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
                traceback="".join(traceback.format_exception(exc)),
            )
        )
        object.__setattr__(result, "finished_at", timezone.now())
        object.__setattr__(result, "status", TaskResultStatus.FAILED)
        # Sent inside the handler, as Django's backends do (receivers see exc_info).
        task_finished.send(sender=EventMQBackend, task_result=result)
        raise
    object.__setattr__(result, "_return_value", value)
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    task_finished.send(sender=EventMQBackend, task_result=result)
    return value


def _when(stamp: float | None) -> datetime | None:
    return None if stamp is None else datetime.fromtimestamp(stamp, tz=UTC)
