"""Django tasks (``@task``) for the Tasks backend tests; each notes what happened in a file."""

from __future__ import annotations

import os
import time
from typing import Any

from django.tasks import task
from django.tasks.signals import task_finished, task_started

from tests.django.results.jobs import note


@task
def multiply(path: str, a: int, b: int) -> int:
    note(path, f"multiply {a} {b}")
    return a * b


@task
def broken(path: str) -> None:
    note(path, "broken")
    raise ValueError("task went wrong")


@task(takes_context=True)
def with_context(context: Any, path: str) -> int:
    note(path, f"attempt {context.attempt}")
    return int(context.attempt)


@task
def labelled(path: str, label: str) -> str:
    note(path, label)
    return label


@task
def interrupted(path: str) -> None:
    note(path, "interrupted")
    raise KeyboardInterrupt


@task
def waits(path: str, release: str) -> str:
    """Occupies its worker until the file ``release`` exists (or a minute passed)."""
    note(path, f"waits started {os.getpid()}")
    deadline = time.monotonic() + 60
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.01)
    return "released"


@task
def dies(path: str) -> None:
    """Its worker process exits under it, on every run."""
    note(path, f"dies {os.getpid()}")
    os._exit(1)


def _note_signal(name: str, task_result: Any) -> None:
    if task_result.task.module_path.startswith(__name__) and task_result.args:
        note(task_result.args[0], f"signal {name} {task_result.id} {task_result.status}")


def _started(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _note_signal("started", task_result)


def _finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _note_signal("finished", task_result)


task_started.connect(_started, dispatch_uid="tests.django.results.started")
task_finished.connect(_finished, dispatch_uid="tests.django.results.finished")
