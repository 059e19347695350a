"""In a worker child: the hooks module (``--hooks``), its functions and its run stage.

A hooks module may define ``setup()`` (once, as the child starts: Django's),
``before_job()`` / ``after_job()`` (around each job: :class:`HooksAround`, a
run stage, :mod:`.run_stages`, made only when it defines one of them) and
``record_results(records)`` (the outcome records, :mod:`.worker_process`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from django_eventmq.jobmanager.run_stages import RunStage
from django_eventmq.runtime.job_context import Running


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

    def around(self) -> HooksAround | None:
        """The run stage of ``before_job``/``after_job`` (None: it has neither)."""
        if self.before_job is _noop and self.after_job is _noop:
            return None
        return HooksAround(self)


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


class HooksAround(RunStage):
    """Calls the hooks module's ``before_job`` before each job, ``after_job`` after it."""

    def __init__(self, hooks: Hooks) -> None:
        self._before = hooks.before_job
        self._after = hooks.after_job

    def before(self, running: Running) -> None:
        self._before()

    def after(self, running: Running) -> None:
        self._after()
