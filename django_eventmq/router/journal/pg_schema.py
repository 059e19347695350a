"""The PostgreSQL journal's tables, in the schema ``emq_<group>``, and the steps
that create and migrate them.

The journal brings its schema up to date itself when it opens: ``meta`` holds
``schema_version``, and every step of :data:`STEPS` past it runs, in order, in
one transaction that first takes the group's transaction-scoped advisory lock
(:func:`.leadership.schema_lock`, the one the lease table is created under),
so two routers starting at once do not race (the second waits, then
finds the work done). A journal already at :data:`VERSION` is opened without
the lock and without DDL. A schema newer than this release knows is refused.

Job states are the same numbers as SQLite's (:class:`.schema.JobState`).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from django_eventmq.errors import ConfigurationError
from django_eventmq.router.journal.schema import DELAYED, POISONED, WAITING
from django_eventmq.router.leadership import check_group, schema_lock

#: The schema steps, in order: step N brings version N-1 to version N. Append
#: only; never change a step that was released.
STEPS: list[tuple[str, ...]] = [
    (
        """CREATE TABLE IF NOT EXISTS jobs (
            seq bigint PRIMARY KEY,          -- acceptance order
            msgid text NOT NULL UNIQUE,      -- the client's id: a resent REQUEST is the same job
            queue text NOT NULL,
            nprio integer NOT NULL,          -- minus the priority header: ascending = first out
            state smallint NOT NULL,
            due double precision NOT NULL DEFAULT 0,
            guarantee boolean NOT NULL,
            headers bytea NOT NULL,
            body bytea NOT NULL,
            client bytea NOT NULL,
            accepted double precision NOT NULL,
            deaths integer NOT NULL DEFAULT 0,
            attempts integer NOT NULL DEFAULT 0,
            reason text NOT NULL DEFAULT '',
            owner text
        )""",
        f"CREATE INDEX IF NOT EXISTS jobs_waiting ON jobs (queue, nprio, seq)"
        f" WHERE state = {WAITING.sql}",
        f"CREATE INDEX IF NOT EXISTS jobs_delayed ON jobs (due) WHERE state = {DELAYED.sql}",
        f"CREATE INDEX IF NOT EXISTS jobs_poisoned ON jobs (seq) WHERE state = {POISONED.sql}",
        """CREATE TABLE IF NOT EXISTS parcels (
            seq bigint PRIMARY KEY,          -- its first job's seq
            count integer NOT NULL,
            queue text NOT NULL,
            nprio integer NOT NULL,
            guarantee boolean NOT NULL,
            headers bytea NOT NULL,
            client bytea NOT NULL,
            accepted double precision NOT NULL,
            jobs bytea NOT NULL               -- the BATCH's JOBS frame as received
        )""",
        "CREATE INDEX IF NOT EXISTS parcels_order ON parcels (queue, nprio, seq)",
        """CREATE TABLE IF NOT EXISTS parcel_digests (
            seq bigint PRIMARY KEY,
            digest bytea NOT NULL UNIQUE
        )""",
        """CREATE TABLE IF NOT EXISTS finished (
            seq bigint PRIMARY KEY,          -- finishing order (pruned oldest first)
            msgid text NOT NULL,
            at double precision NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS schedules (
            seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            unschedule boolean NOT NULL,
            job_key text NOT NULL,
            timing_key text NOT NULL,
            frames bytea NOT NULL
        )""",
    ),
]

#: The schema version this release writes.
VERSION = len(STEPS)


def schema_name(group: str) -> str:
    """``emq_<group>``; :class:`ConfigurationError` for a name that cannot be one."""
    return f"emq_{check_group(group)}"


def stored_version(conn: psycopg.Connection[Any], schema: str) -> int | None:
    """The schema's ``schema_version`` (None: no meta table yet). In autocommit."""
    found = conn.execute("SELECT to_regclass(%s)", (f"{schema}.meta",)).fetchone()
    if found is None or found[0] is None:
        return None
    row = conn.execute(
        sql.SQL("SELECT value FROM {}.meta WHERE key = 'schema_version'").format(
            sql.Identifier(schema)
        )
    ).fetchone()
    return None if row is None else int(row[0])


def migrate(conn: psycopg.Connection[Any], group: str) -> int:
    """Bring ``emq_<group>`` up to :data:`VERSION` (an autocommit connection); returns
    how many steps ran (0: it was up to date, nothing was locked or changed)."""
    schema = schema_name(group)
    if _check(stored_version(conn, schema), schema) == VERSION:
        return 0
    name = sql.Identifier(schema)
    # Under the lock the lease table is created with (.leadership.schema_lock);
    # should a CREATE ... IF NOT EXISTS still meet one being made, try again.
    for attempt in range(3):
        try:
            with conn.transaction():
                schema_lock(conn.cursor(), group)
                conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(name))
                conn.execute(
                    sql.SQL(
                        "CREATE TABLE IF NOT EXISTS {}.meta (key text PRIMARY KEY, value bigint"
                        " NOT NULL)"
                    ).format(name)
                )
                current = _check(stored_version(conn, schema), schema) or 0
                conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(name))
                for step in STEPS[current:]:
                    for statement in step:
                        conn.execute(statement)
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', %s)"
                    " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                    (VERSION,),
                )
                return VERSION - current
        except (psycopg.errors.UniqueViolation, psycopg.errors.DuplicateObject):
            if attempt == 2:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _check(version: int | None, schema: str) -> int | None:
    if version is not None and version > VERSION:
        raise ConfigurationError(
            f"PostgreSQL schema {schema} is at version {version}, written by a newer "
            f"django-eventmq (this one knows up to {VERSION}): upgrade this router, or use "
            "another group"
        )
    return version
