"""The PostgreSQL journal creates and migrates its schema itself: ``emq_<group>``,
versioned in ``meta``, under an advisory lock, so routers starting together do
not race; a schema from a newer release is refused."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from django_eventmq.errors import ConfigurationError
from django_eventmq.router.journal import pg_schema
from django_eventmq.router.journal.postgres import PostgresJournal
from tests.router.journal_pg.conftest import Opener, add

pytestmark = pytest.mark.postgres


def tables(conn: psycopg.Connection[Any], schema: str) -> set[str]:
    rows = conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
    ).fetchall()
    return {name for (name,) in rows}


def one_job_stored(open_journal: Opener) -> None:
    journal = open_journal()
    add(journal, 1)
    journal.commit()
    journal.close()


def test_the_first_open_creates_the_schema_and_stores_its_version(
    open_journal: Opener, other: psycopg.Connection[Any], pg_group: str
) -> None:
    schema = f"emq_{pg_group}"
    assert tables(other, schema) == set()
    open_journal()
    assert tables(other, schema) == {
        "jobs", "parcels", "parcel_digests", "finished", "schedules", "meta"
    }  # fmt: skip
    assert other.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (
        pg_schema.VERSION,
    )
    assert pg_schema.stored_version(other, schema) == pg_schema.VERSION


def test_a_second_open_changes_nothing_and_keeps_the_rows(
    open_journal: Opener, other: psycopg.Connection[Any], pg_group: str
) -> None:
    one_job_stored(open_journal)
    assert pg_schema.migrate(other, pg_group) == 0  # no step ran
    journal = open_journal()
    assert [r.msgid for r in journal.waiting("default", None, 10)] == ["m1"]


def test_a_schema_left_without_its_version_is_brought_up_to_date(
    open_journal: Opener, other: psycopg.Connection[Any], pg_group: str
) -> None:
    # A first start that died after its tables and before its version (each
    # step is idempotent): the next one runs the steps again, keeping the rows.
    one_job_stored(open_journal)
    other.execute("DELETE FROM meta")
    assert pg_schema.migrate(other, pg_group) == pg_schema.VERSION
    assert open_journal().holds_row("m1")


def test_routers_opening_at_once_do_not_race(pg_dsn: str, pg_group: str) -> None:
    start = threading.Barrier(4)
    results: list[object] = []

    def open_one() -> None:
        start.wait()
        try:
            journal = PostgresJournal(pg_dsn, group=pg_group)
        except Exception as exc:  # reported below, with the others
            results.append(exc)
            return
        results.append(journal.path)
        journal.close()

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(results) == 4
    assert all(isinstance(result, str) for result in results), results


def test_a_schema_from_a_newer_release_is_refused(
    open_journal: Opener, other: psycopg.Connection[Any]
) -> None:
    open_journal().close()
    other.execute(
        "UPDATE meta SET value = %s WHERE key = 'schema_version'", (pg_schema.VERSION + 1,)
    )
    with pytest.raises(ConfigurationError, match="newer django-eventmq"):
        open_journal()


def test_the_group_names_the_schema() -> None:
    assert pg_schema.schema_name("default") == "emq_default"
    with pytest.raises(ConfigurationError, match="not a valid name"):
        pg_schema.schema_name('x"; DROP TABLE jobs; --')
