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
    # The Tasks backend's dispatcher job must be registered in every worker.
    from . import tasks_runner

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

    Called in the worker's records thread, which has its own connection that
    the job hooks do not look after: after a failure (the database restarted)
    an unusable one is dropped, so the next batch connects again.
    """
    from django.db import close_old_connections

    from .results import record_results as write

    try:
        write(records)
    except Exception:
        close_old_connections()
        raise
