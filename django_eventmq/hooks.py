"""Installs the Django-side hooks the runtime uses (called from ``AppConfig.ready()``).

The runtime never imports Django; it asks :mod:`django_eventmq.runtime.hooks`
for these instead: ``transaction.on_commit`` for ``.delay_on_commit()``,
the results table for ``handle.status`` / ``handle.result``, the
recording of a cancellation and of a job the router dropped as expired, and
the outbox table (``@job(outbox=True)``).
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import transaction

from django_eventmq.runtime import hooks as runtime_hooks


def _on_commit(callback: Callable[[], object]) -> Callable[[], bool]:
    # The default database's transaction: the one a view's writes are in.
    connection = transaction.get_connection()
    transaction.on_commit(callback)

    def pending() -> bool:
        # Django keeps a transaction's callbacks in run_on_commit until its commit
        # runs them (taking each out first) or a rollback drops them.
        return any(entry[1] is callback for entry in connection.run_on_commit)

    return pending


def _record_cancel(msgid: str) -> None:
    from django_eventmq.result_recording import record_cancel

    record_cancel(msgid)


def _record_expired(msgid: str, message: str) -> None:
    from django_eventmq.result_recording import record_expired

    record_expired(msgid, message)


def install() -> None:
    """Point the runtime at Django's transactions and our results table."""
    from django_eventmq.outbox import TableOutbox
    from django_eventmq.results import TableReader

    runtime_hooks.install(
        on_commit=_on_commit,
        results=TableReader(),
        record_cancel=_record_cancel,
        record_expired=_record_expired,
        outbox=TableOutbox(),
    )
