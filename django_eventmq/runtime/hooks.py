"""Hooks the Django layer installs into the runtime (which never imports Django).

The app's ``ready()`` installs them: how to defer work until the current
database transaction commits (``.delay_on_commit()``), how to read the
results table (``handle.status`` / ``handle.result``), how to record a
cancellation and how to keep a job in the outbox table until it is sent.
Without Django they are absent and the features that need them say so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from django_eventmq.errors import ConfigurationError

#: Runs a callback once the current transaction commits (at once outside one), and
#: returns a function that is True while the callback still waits for that commit
#: (False once it ran, or a rollback dropped it).
OnCommit = Callable[[Callable[[], object]], Callable[[], bool]]


class ResultsReader(Protocol):
    """Reads one job's row of the results table."""

    def status(self, msgid: str) -> str | None: ...

    def result(self, msgid: str) -> Any: ...


class Outbox(Protocol):
    """The outbox table: jobs written in the caller's transaction, deleted once sent."""

    def keep(self, msgid: str, queue: str, headers: str, body: str) -> None:
        """Write the job's row in the current transaction (at once outside one)."""
        ...

    def sent(self, msgid: str) -> None:
        """The router acknowledged the job: delete its row."""
        ...


@dataclass
class _Installed:
    on_commit: OnCommit | None = None
    results: ResultsReader | None = None
    record_cancel: Callable[[str], None] | None = None
    record_expired: Callable[[str, str], None] | None = None
    outbox: Outbox | None = None


_installed = _Installed()


def install(
    *,
    on_commit: OnCommit | None = None,
    results: ResultsReader | None = None,
    record_cancel: Callable[[str], None] | None = None,
    record_expired: Callable[[str, str], None] | None = None,
    outbox: Outbox | None = None,
) -> None:
    """Install (or with ``None`` keep) the Django-side hooks."""
    if on_commit is not None:
        _installed.on_commit = on_commit
    if results is not None:
        _installed.results = results
    if record_cancel is not None:
        _installed.record_cancel = record_cancel
    if record_expired is not None:
        _installed.record_expired = record_expired
    if outbox is not None:
        _installed.outbox = outbox


def on_commit() -> OnCommit:
    """The function that runs a callback after the current transaction commits."""
    if _installed.on_commit is None:
        raise ConfigurationError(
            "delay_on_commit() needs the Django app: add 'django_eventmq' to INSTALLED_APPS"
        )
    return _installed.on_commit


def outbox() -> Outbox:
    """The outbox table (``@job(outbox=True)``, ``OUTBOX``)."""
    if _installed.outbox is None:
        raise ConfigurationError(
            "the outbox is a table of the Django app: add 'django_eventmq' to INSTALLED_APPS"
        )
    return _installed.outbox


def results_reader() -> ResultsReader:
    """The results table reader."""
    if _installed.results is None:
        raise ConfigurationError(
            "job results live in the Django database: add 'django_eventmq' to INSTALLED_APPS"
        )
    return _installed.results


def cancel_recorder() -> Callable[[str], None] | None:
    """What records a cancellation in the results table (``None`` without Django)."""
    return _installed.record_cancel


def expired_recorder() -> Callable[[str, str], None] | None:
    """What records ``expired(msgid, message)`` in the results table for a job the router
    dropped unrun (it has no database; its client read the Expired reply). None without Django."""
    return _installed.record_expired
