"""Fixtures of the PostgreSQL journal's tests: a real server (tests/pg_support.py),
a group of its own per test, and the journals a test opened closed after it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from django_eventmq.router.journal.postgres import PostgresJournal
from tests.pg_support import pg_dsn as pg_dsn
from tests.pg_support import pg_group as pg_group
from tests.router.test_journal import add as add  # typed for Journal; any journal will do

Opener = Callable[..., PostgresJournal]


@pytest.fixture
def open_journal(pg_dsn: str, pg_group: str) -> Iterator[Opener]:
    """``open_journal(**options)``: a PostgresJournal of this test's group."""
    opened: list[PostgresJournal] = []

    def opener(**options: Any) -> PostgresJournal:
        journal = PostgresJournal(pg_dsn, group=options.pop("group", pg_group), **options)
        opened.append(journal)
        return journal

    yield opener
    for journal in opened:
        journal.close()


@pytest.fixture
def other(pg_dsn: str, pg_group: str) -> Iterator[psycopg.Connection[Any]]:
    """A second connection (autocommit), in the group's schema: what others see."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('search_path', %s, false)", (f"emq_{pg_group}",))
        yield conn


def crash(journal: PostgresJournal) -> None:
    """End the journal's connection without a commit, as a killed router would."""
    journal.conn.close()
