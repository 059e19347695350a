"""Poisoned jobs retried or purged from the admin, in both journals: a retried one
waits again with its deaths forgotten, a purged one is gone; both across reopening."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from django_eventmq.router.journal.api import JournalLike
from django_eventmq.router.journal.postgres import PostgresJournal
from django_eventmq.router.journal.store import LEASED, POISONED, WAITING, Journal
from tests.pg_support import pg_dsn as pg_dsn
from tests.pg_support import pg_group as pg_group
from tests.router.test_journal import add

Reopen = Callable[[], JournalLike]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def reopen(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Reopen]:
    """``reopen()``: the journal of this test (closing the one opened before)."""
    opened: list[JournalLike] = []

    def opener() -> JournalLike:
        for journal in opened:
            journal.close()
        if request.param == "sqlite":
            journal: JournalLike = Journal(str(tmp_path / "journal.sqlite3"))
        else:
            dsn = request.getfixturevalue("pg_dsn")
            journal = PostgresJournal(dsn, group=request.getfixturevalue("pg_group"))
        opened.append(journal)
        return journal

    yield opener
    opened[-1].close()


def poisoned_job(journal: JournalLike, seq: int) -> None:
    add(journal, seq, state=LEASED)  # type: ignore[arg-type]  # any journal will do
    journal.poison(seq, deaths=3, reason="poisoned: its worker died, 3 time(s)")


def test_a_retried_poisoned_job_waits_again_with_no_deaths(reopen: Reopen) -> None:
    journal = reopen()
    poisoned_job(journal, 1)
    poisoned_job(journal, 2)
    journal.commit()
    assert [row.msgid for row, _ in journal.poisoned()] == ["m1", "m2"]
    journal.unpoison(1)
    journal.commit()
    journal = reopen()
    found = journal.find("m1")
    assert found is not None and found[0] == WAITING and found[1].deaths == 0
    assert [row.msgid for row, _ in journal.poisoned()] == ["m2"]
    assert [row.msgid for row in journal.waiting("default", None, 10)] == ["m1"]
    assert journal.counts()[POISONED] == {"default": 1}


def test_a_purged_poisoned_job_is_gone(reopen: Reopen) -> None:
    journal = reopen()
    poisoned_job(journal, 1)
    journal.commit()
    journal.poisoned()  # the PostgreSQL journal answers later asks from memory
    journal.delete(1)
    assert journal.poisoned() == []  # seen before the commit too
    journal.commit()
    journal = reopen()
    assert journal.find("m1") is None and journal.poisoned() == []
    assert journal.counts()[POISONED] == {}
