"""Job-manager worker hooks for Django projects (``emq_jobmanager`` uses them).

Each worker process sets Django up once, and closes database connections
that are broken or past ``CONN_MAX_AGE`` around every job, as Django's
request cycle does around every request.
"""

from __future__ import annotations


def setup() -> None:
    """Set Django up in a new worker process (apps, logging, ``jobs`` discovery)."""
    import django

    django.setup()


def before_job() -> None:
    """Drop stale database connections before a job runs."""
    from django.db import close_old_connections

    close_old_connections()


def after_job() -> None:
    """Drop stale database connections after a job ran (or failed)."""
    from django.db import close_old_connections

    close_old_connections()
