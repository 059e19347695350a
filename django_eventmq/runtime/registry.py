"""Which callables a job manager may run.

Only functions registered with ``@job`` (in modules imported at start-up) or
living in a module named in ``ALLOWED_JOB_MODULES`` run. Anything else is
refused, so the router's port is never a remote code execution port. A job
module is never imported because a message named it.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from django_eventmq.errors import ConfigurationError, JobNotAllowed, JobNotFound
from django_eventmq.protocol import JobBody

_lock = threading.Lock()
_jobs: dict[str, Callable[..., Any]] = {}

#: Names a job had before it moved -> the name it is registered under now.
#: Journals, results rows and clients of an older release keep sending the old
#: name, so it must keep resolving (to the job, never to an import of it).
ALIASES: dict[str, str] = {
    # The Django Tasks runner lived in the backend's module for a release.
    "django_eventmq.tasks_backend.run_task": "django_eventmq.tasks_runner.run_task",
}


def canonical_name(name: str) -> str:
    """The registered name a job ``name`` stands for (itself unless it is an old alias)."""
    return ALIASES.get(name, name)


def job_name(path: str, callable_name: str) -> str:
    """The registry key of a job: ``module.func`` (or ``module:Class.method``)."""
    return f"{path}.{callable_name}"


def register(func: Callable[..., Any], path: str, callable_name: str) -> str:
    """Register ``func`` as runnable under ``path``/``callable_name``."""
    name = job_name(path, callable_name)
    with _lock:
        _jobs[name] = func
    return name


def unregister(name: str) -> None:
    with _lock:
        _jobs.pop(name, None)


def registered_names() -> list[str]:
    with _lock:
        return sorted(_jobs)


def async_names() -> list[str]:
    """Registered jobs that are ``async def`` (coroutine or async generator functions):
    a worker process runs several of them at once on its event loop."""
    with _lock:
        jobs = list(_jobs.items())
    return sorted(
        name
        for name, func in jobs
        if inspect.iscoroutinefunction(func) or inspect.isasyncgenfunction(func)
    )


def import_job_modules(modules: Iterable[str]) -> list[str]:
    """Import modules so the ``@job``\\s in them register; returns their names.

    Raises :class:`JobNotFound` naming the module that failed to import.
    """
    done = []
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise JobNotFound(f"job module {module!r} could not be imported: {exc}") from exc
        done.append(module)
    return done


def check_job_modules(modules: Iterable[str]) -> None:
    """Refuse job modules that do not exist, before any worker process starts.

    Found, not imported: a module may need what only a worker's hooks set up
    (Django), so one that fails as it imports is the worker's to report. A
    misspelt one would otherwise leave every worker process failing to start.
    Raises :class:`ConfigurationError` naming each missing module.
    """
    problems = []
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
            why = f"no module named {module!r}"
        except ModuleNotFoundError as exc:  # a package on its path is missing
            found, why = False, str(exc)
        except (ImportError, ValueError):
            continue  # it exists but does not import here: the workers say why
        if not found:
            problems.append(f"{module!r} ({why})")
    if problems:
        raise ConfigurationError(
            f"job module(s) {', '.join(problems)} cannot be imported (--job-module or "
            "JOB_MODULES): fix the name, or the Python path the job manager runs with "
            "(PYTHONPATH, its working directory), or remove it"
        )


def _module_allowed(module: str, allowed: Iterable[str]) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in allowed)


QueueAllowed = Mapping[str, Iterable[str]] | Iterable[tuple[str, Iterable[str]]]


def allowed_on_queue(name: str, queue: str, queue_allowed: QueueAllowed) -> bool:
    """True when job ``name`` may run on ``queue`` under a per-queue allowlist.

    Entries are job names (``app.jobs.send``) or module patterns
    (``app.jobs.*``, also matching ``app.jobs:Class.method``). A queue without
    an entry falls back to ``"*"``; with neither, the queue is unrestricted.
    An old name (:data:`ALIASES`) is allowed when it or its new name is.
    """
    return any(
        _allowed_by_table(candidate, queue, queue_allowed)
        for candidate in dict.fromkeys((name, canonical_name(name)))
    )


def _allowed_by_table(name: str, queue: str, queue_allowed: QueueAllowed) -> bool:
    table = dict(queue_allowed.items() if isinstance(queue_allowed, Mapping) else queue_allowed)
    patterns = table.get(queue, table.get("*"))
    if patterns is None:
        return True
    for pattern in patterns:
        if pattern == name:
            return True
        if pattern.endswith(".*"):
            module = pattern[:-2]
            if name.startswith(module + ".") or name.startswith(module + ":"):
                return True
    return False


def _why_not_registered(body: JobBody) -> str:
    """Why ``body`` names no ``@job`` here, and how to fix it (nothing is imported).

    A module this process never imported is the usual cause (the ``@job`` is
    fine but its module was not listed); tell that apart from a function that
    is really not decorated.
    """
    module = sys.modules.get(body.module)
    if module is None:
        return (
            f"job {body.name!r} is not registered: its module {body.module!r} was never "
            f"imported by this job manager; list it in JOB_MODULES (EVENTMQ['JOB_MODULES'], "
            f"EMQ_JOB_MODULES or --job-module {body.module}), or, under Django, move the @job "
            "into an installed app's jobs.py; refusing to run it"
        )
    if body.class_name is None and not hasattr(module, body.callable):
        what = f"module {body.module!r} (imported) has no {body.callable!r}"
    elif body.class_name is None:
        what = f"{body.callable!r} in module {body.module!r} (imported) is not decorated with @job"
    else:
        what = "@job takes module-level functions only, not methods"
    return (
        f"job {body.name!r} is not registered with @job: {what}, and {body.module!r} is not "
        "in ALLOWED_JOB_MODULES; refusing to run it"
    )


def _moved(body: JobBody) -> JobBody:
    """``body`` naming where an aliased job lives now (so errors point there)."""
    name = canonical_name(body.name)
    if name == body.name:
        return body
    path, _, func = name.rpartition(".")
    return JobBody(path=path, callable=func)


def resolve(
    body: JobBody,
    allowed_modules: Iterable[str] = (),
    queue: str | None = None,
    queue_allowed: QueueAllowed | None = None,
) -> Callable[..., Any]:
    """The callable ``body`` names, ready to call with ``body.args``/``kwargs``.

    An old name in :data:`ALIASES` is looked up under its new name.

    Raises :class:`JobNotAllowed` for an unregistered job outside the allowed
    modules, or one the per-queue allowlist ``queue_allowed`` does not allow on
    ``queue``; :class:`JobNotFound` when an allowed one cannot be found.
    """
    if (
        queue_allowed
        and queue is not None
        and not allowed_on_queue(body.name, queue, queue_allowed)
    ):
        raise JobNotAllowed(
            f"job {body.name!r} is not allowed on queue {queue!r} (QUEUE_ALLOWED_JOBS); "
            "refusing to run it"
        )
    with _lock:
        func = _jobs.get(canonical_name(body.name))
    if func is not None:
        return func
    if not _module_allowed(body.module, allowed_modules):
        raise JobNotAllowed(_why_not_registered(_moved(body)))
    try:
        module = sys.modules.get(body.module) or importlib.import_module(body.module)
        target: Any = module
        if body.class_name is not None:
            target = getattr(module, body.class_name)(*body.class_args, **body.class_kwargs)
        found = getattr(target, body.callable)
    except (ImportError, AttributeError) as exc:
        raise JobNotFound(f"job {body.name!r} not found: {exc}") from exc
    if not callable(found):
        raise JobNotFound(f"job {body.name!r} is not callable")
    return found  # type: ignore[no-any-return]
