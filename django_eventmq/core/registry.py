"""Which callables a job manager may run.

Only functions registered with ``@job`` (in modules imported at start-up) or
living in a module named in ``ALLOWED_JOB_MODULES`` run. Anything else is
refused, so the router's port is never a remote code execution port. A job
module is never imported because a message named it.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import JobNotAllowed, JobNotFound
from ..protocol import JobBody

_lock = threading.Lock()
_jobs: dict[str, Callable[..., Any]] = {}


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


def _module_allowed(module: str, allowed: Iterable[str]) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in allowed)


def resolve(body: JobBody, allowed_modules: Iterable[str] = ()) -> Callable[..., Any]:
    """The callable ``body`` names, ready to call with ``body.args``/``kwargs``.

    Raises :class:`JobNotAllowed` for an unregistered job outside the allowed
    modules, :class:`JobNotFound` when an allowed one cannot be found.
    """
    with _lock:
        func = _jobs.get(body.name)
    if func is not None:
        return func
    if not _module_allowed(body.module, allowed_modules):
        raise JobNotAllowed(
            f"job {body.name!r} is not registered with @job and its module is not in "
            "ALLOWED_JOB_MODULES; refusing to run it"
        )
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
