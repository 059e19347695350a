"""Hook points for what happens to a job: sent (by a client), started, succeeded,
failed or retrying (in a worker child).

The process packages never import Django; the Django app's ``signals`` module
installs a :class:`Listener` here when it is imported (anyone connecting a
receiver imports it), which sends the Django signals. Nobody imported it: the
hot paths find :data:`listener` None and do nothing more.

A listener gets the job as a :class:`~.job_context.Running` (or ``Lazy``):
``.context()`` builds the :class:`~.job_context.JobContext` only when a
receiver wants it.
"""

from __future__ import annotations

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


def install(new: Listener | None) -> None:
    """Install ``new`` as the listener (None: none)."""
    global listener
    listener = new
