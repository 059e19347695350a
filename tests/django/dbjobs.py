"""Jobs of tests/django/test_db_connections.py: they report their database session."""

from __future__ import annotations

from django.db import connection

from django_eventmq import job


@job(queue="db", reply_requested=True)
def backend_pid() -> int:
    """The PostgreSQL backend pid of this worker's connection (a query on it)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])
