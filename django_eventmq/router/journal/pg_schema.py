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
Strings that come from the wire (msgid, queue, schedule keys) and the poison
reason are stored as UTF-8 in ``bytea``: PostgreSQL's ``text`` cannot hold a
NUL character, and one in a client's msgid must not fail the leader's
transaction (and then, resent, its successor's). :func:`encoded_row` and
:func:`decoded_row` convert at the boundary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from django_eventmq.errors import ConfigurationError
from django_eventmq.router.journal.schema import DELAYED, LEASED, POISONED, WAITING, Row, to_row
from django_eventmq.router.leadership import check_group, schema_lock

#: The schema steps, in order: step N brings version N-1 to version N. Append
#: only; never change a step that was released.
STEPS: list[tuple[str, ...]] = [
    (
        """CREATE TABLE IF NOT EXISTS jobs (
            seq bigint PRIMARY KEY,          -- acceptance order
            msgid bytea NOT NULL UNIQUE,     -- the client's id: a resent REQUEST is the same job
            queue bytea NOT NULL,
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
            reason bytea NOT NULL DEFAULT '',
            owner text
        )""",
        f"CREATE INDEX IF NOT EXISTS jobs_waiting ON jobs (queue, nprio, seq)"
        f" WHERE state = {WAITING.sql}",
        f"CREATE INDEX IF NOT EXISTS jobs_delayed ON jobs (due) WHERE state = {DELAYED.sql}",
        f"CREATE INDEX IF NOT EXISTS jobs_poisoned ON jobs (seq) WHERE state = {POISONED.sql}",
        """CREATE TABLE IF NOT EXISTS parcels (
            seq bigint PRIMARY KEY,          -- its first job's seq
            count integer NOT NULL,
            queue bytea NOT NULL,
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
            msgid bytea NOT NULL,
            at double precision NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS schedules (
            seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            unschedule boolean NOT NULL,
            job_key bytea NOT NULL,
            timing_key bytea NOT NULL,
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


# -- statements and rows ----------------------------------------------------------------
#: The columns of a new job (:func:`.schema.new_row`), in its order, and their
#: binary COPY types.
NEW_COLUMNS = (
    "seq, msgid, queue, nprio, state, due, guarantee, headers, body, client, accepted, deaths,"
    " attempts, reason, owner"
)
NEW_TYPES = [
    "int8", "bytea", "bytea", "int4", "int2", "float8", "bool", "bytea", "bytea", "bytea",
    "float8", "int4", "int4", "bytea", "text",
]  # fmt: skip
#: The SQL type of each column a change sets (:data:`.schema.COLUMN_AT`), and seq.
CHANGE_TYPES = {
    "state": "int2",
    "due": "float8",
    "deaths": "int4",
    "attempts": "int4",
    "reason": "bytea",
    "seq": "int8",
}
#: New jobs are copied (COPY, binary) into this temporary table, then moved in one
#: statement that skips a held msgid: twice the rate of an executemany INSERT.
STAGE = "emq_new_jobs"
STAGE_CREATE = (
    f"CREATE TEMPORARY TABLE IF NOT EXISTS {STAGE} (LIKE jobs INCLUDING DEFAULTS)"
    " ON COMMIT DELETE ROWS"
)
STAGE_COPY = f"COPY {STAGE} ({NEW_COLUMNS}) FROM STDIN (FORMAT BINARY)"
STAGE_MOVE = (
    f"WITH moved AS (DELETE FROM {STAGE} RETURNING {NEW_COLUMNS})"  # noqa: S608
    f" INSERT INTO jobs ({NEW_COLUMNS}) SELECT {NEW_COLUMNS} FROM moved ON CONFLICT DO NOTHING"
)
INSERT_JOB = (
    f"INSERT INTO jobs ({NEW_COLUMNS}) VALUES ({', '.join(['%s'] * 15)})"  # noqa: S608
    " ON CONFLICT DO NOTHING"
)
INSERT_PARCEL = (
    "INSERT INTO parcels (seq, count, queue, nprio, guarantee, headers, client, accepted, jobs)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
#: The columns of a :class:`.schema.Row`, in its order.
ROW = "seq, msgid, queue, nprio, guarantee, headers, body, client, accepted, deaths, attempts"
WAITING_FIRST = (
    f"SELECT {ROW} FROM jobs WHERE queue = %s AND state = {WAITING.sql}"  # noqa: S608
    " ORDER BY nprio, seq LIMIT %s"
)
WAITING_AFTER = (
    f"SELECT {ROW} FROM jobs WHERE queue = %s AND state = {WAITING.sql}"  # noqa: S608
    " AND (nprio, seq) > (%s, %s) ORDER BY nprio, seq LIMIT %s"
)
DUE = (
    f"SELECT {ROW} FROM jobs WHERE state = {DELAYED.sql} AND due <= %s"  # noqa: S608
    " ORDER BY due LIMIT %s"
)
NEXT_DUE = f"SELECT MIN(due) FROM jobs WHERE state = {DELAYED.sql}"  # noqa: S608
POISONED_ROWS = (
    f"SELECT {ROW}, reason FROM jobs WHERE state = {POISONED.sql}"  # noqa: S608
    " ORDER BY seq LIMIT %s"
)
FIND = f"SELECT state, {ROW} FROM jobs WHERE msgid = %s"  # noqa: S608
RECOVER = f"UPDATE jobs SET state = {WAITING.sql} WHERE state = {LEASED.sql}"  # noqa: S608
SIZE = (
    "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
    " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'"
)


def encoded_row(values: list[Any]) -> tuple[Any, ...]:
    """A new job's values (:func:`.schema.new_row`) as stored: msgid, queue, reason in UTF-8."""
    return (
        values[0], values[1].encode(), values[2].encode(), *values[3:13], values[13].encode(),
        values[14],
    )  # fmt: skip


def decoded_row(values: Sequence[Any]) -> Row:
    """A :class:`.schema.Row` from the columns :data:`ROW` read."""
    return to_row((values[0], values[1].decode(), values[2].decode(), *values[3:]))
