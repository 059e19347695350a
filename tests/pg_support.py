"""A real PostgreSQL for the tests of the PostgreSQL journal and of router groups.

The server is the one on this machine (``scripts/test.sh`` starts it), reached
by ``EMQ_TEST_PG_DSN`` (default: user postgres, database test on
127.0.0.1:5432). Each test gets a group name of its own, so its journal
schema (``emq_<group>``) is its own, and drops it afterwards. Without a
server these tests are skipped with the reason, except under CI (``CI=true``),
where a missing server is a failure: there it must be there.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

DSN = os.environ.get(
    "EMQ_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test?connect_timeout=5"
)


def require_postgres() -> str:
    """The DSN of a reachable server; skip (fail under CI) when there is none."""
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - the test extra installs it
        _missing(f"psycopg is not installed ({exc}); pip install -e '.[test]'")
    try:
        with psycopg.connect(DSN) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        _missing(f"no PostgreSQL at {DSN}: {exc}".strip())
    return DSN


def _missing(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def drop_group(dsn: str, group: str) -> None:
    """Drop everything a group left in the database (its schema)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "emq_{group}" CASCADE')


@pytest.fixture
def pg_dsn() -> str:
    return require_postgres()


@pytest.fixture
def pg_group(pg_dsn: str) -> Iterator[str]:
    """A group name no other test uses; its schema is dropped afterwards."""
    group = "t" + uuid.uuid4().hex[:12]
    yield group
    drop_group(pg_dsn, group)
