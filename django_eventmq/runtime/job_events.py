"""Hook points for what happens to a job: sent (by a client), started, succeeded,
failed or retrying (in a worker child).

The process packages never import Django; the Django app's ``signals`` module
installs a :class:`Listener` here when it is imported (anyone connecting a
receiver imports it), which sends the Django signals. Nobody imported it: the
hot paths find :data:`listener` None and do nothing more. A worker child's
run stages are made again when a listener is installed (:func:`watch`), so
its runs call the job signals' stage only while one listens.

A listener gets the job as a :class:`~.job_context.Running` (or ``Lazy``):
``.context()`` builds the :class:`~.job_context.JobContext` only when a
receiver wants it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, Protocol

from django_eventmq.runtime.job_context import Lazy, Running


class Listener(Protocol):
    """What the Django app's signals module installs (every method may raise nothing)."""

    def sent(self, job: Running | Lazy) -> None: ...

    def started(self, job: Running | Lazy) -> None: ...

    def succeeded(self, job: Running | Lazy, result: Any) -> None: ...

    def failed(self, job: Running | Lazy, exception: BaseException) -> None: ...

    def retrying(self, job: Running | Lazy, exception: BaseException) -> None: ...


#: The installed listener (None: nobody listens; the hot paths test this first).
listener: Listener | None = None


#: Called after each install (weakly held: a runner gone is forgotten).
_watchers: list[weakref.WeakMethod[Callable[[], None]]] = []


def install(new: Listener | None) -> None:
    """Install ``new`` as the listener (None: none), and tell the watchers."""
    global listener
    listener = new
    alive = []
    for ref in _watchers:
        method = ref()
        if method is not None:
            method()
            alive.append(ref)
    _watchers[:] = alive


def watch(method: weakref.WeakMethod[Callable[[], None]]) -> None:
    """Call ``method`` (while its object lives) after each :func:`install`."""
    _watchers[:] = [ref for ref in _watchers if ref() is not None]
    _watchers.append(method)
