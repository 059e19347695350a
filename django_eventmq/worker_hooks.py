"""Job-manager worker hooks for Django projects (``emq_jobmanager`` uses them).

Each worker process sets Django up once, and closes database connections
that are broken or past ``CONN_MAX_AGE`` around every job, as Django's
request cycle does around every request. Job managers hand batches of job
outcomes to :func:`record_results`, which writes them to the results table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def setup() -> None:
    """Set Django up in a new worker process (apps, logging, ``jobs`` discovery)."""
    import django

    django.setup()
    try:
        import django.tasks  # Django >= 6.0 only
    except ImportError:
        return
    # The Tasks backend's dispatcher job must be registered in every worker.
    from django_eventmq import tasks_runner

    tasks_runner.discover_tasks()


def before_job() -> None:
    """Drop stale database connections before a job runs."""
    from django.db import close_old_connections

    close_old_connections()


def after_job() -> None:
    """Drop stale database connections after a job ran (or failed)."""
    from django.db import close_old_connections

    close_old_connections()


def record_results(records: list[Mapping[str, Any]]) -> None:
    """Write a batch of job outcome records to the results table (one query).

    Called in the worker's records thread, whose connection the job hooks do
    not look after: it is looked after here, around each batch, as around a
    job (``CONN_MAX_AGE``, ``CONN_HEALTH_CHECKS``; an unusable one dropped).
    """
    from django_eventmq.result_recording import record_results as write

    _close_old_connections()
    try:
        write(records)
    finally:
        _close_old_connections()


def _close_old_connections() -> None:
    """Django's ``close_old_connections``, except for a connection in a transaction.

    A caller's open transaction (a test's) is its own; closing the connection
    under it would end it.
    """
    from django.db import connections

    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()
