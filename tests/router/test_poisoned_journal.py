"""Poisoned jobs retried or purged from the admin, in both journals: a retried one
waits again with its deaths forgotten, a purged one is gone; both across reopening.
And a poisoned job's REJECT leaves the router only once the journal holds it poisoned."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from django_eventmq.router.journal import commit as journal_module
from django_eventmq.router.journal.api import JournalLike
from django_eventmq.router.journal.postgres import PostgresJournal
from django_eventmq.router.journal.store import LEASED, POISONED, WAITING, Journal
from django_eventmq.router.router import Router
from tests.pg_support import pg_dsn as pg_dsn
from tests.pg_support import pg_group as pg_group
from tests.router.test_journal import add
from tests.router.test_journal_failures import FullAtCommit, install
from tests.router.test_router import JOB, Peer, make_settings
from tests.router.test_stored_msgids_outage import answer
from tests.support import wait_for

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


def stored_state(path: Path, msgid: str) -> int:
    """The state a restarted router would read for ``msgid`` (committed writes only)."""
    reader = sqlite3.connect(path)
    try:
        (state,) = reader.execute("SELECT state FROM jobs WHERE msgid = ?", (msgid,)).fetchone()
    finally:
        reader.close()
    return int(state)


def test_a_poisoned_jobs_reject_waits_for_the_commit_that_holds_it(
    zctx: zmq.Context[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job whose worker died POISON_AFTER times is set aside and its client told
    REJECT (it never runs again): told only once the journal holds it POISONED, or
    a router killed before that commit would run the job again after its restart."""
    monkeypatch.setattr(journal_module, "RETRY_INTERVAL", 0.0, raising=False)  # retry each loop
    path = tmp_path / "journal.sqlite3"
    router = Router(make_settings(journal=True, journal_path=str(path), poison_after=1))
    router.start()
    client = Peer(zctx, router.frontend_address, b"client")
    worker = Peer(zctx, router.backend_address, b"worker")
    try:
        worker.send("INFORM", "default", "worker")
        worker.send("READY")
        msgid = client.send("REQUEST", "default", "guarantee", JOB)
        assert answer(router, client, msgid) == "ACK"

        got: list[list[bytes]] = []

        def handed() -> bool:
            router.loop_once(timeout_ms=10)
            while worker.pending():
                got.append(worker.recv_raw())
            return any(f[2] == b"REQUEST" and f[3].decode() == msgid for f in got)

        wait_for(handed, what="the job handed to the worker")
        before = stored_state(path, msgid)  # a lease may be written lazily: not POISONED
        assert before != POISONED
        faulty = install(router.book.journal, FullAtCommit(router.book.journal.db, {}))
        faulty.full = True
        worker.send("DONE", msgid, "died", "killed by signal 9")
        wait_for(lambda: router.loop_once(timeout_ms=1) or faulty.points > 0, what="a commit")
        for _ in range(5):
            router.loop_once(timeout_ms=1)
        assert router.book.poisoned.by_queue["default"] == 1  # set aside in memory...
        assert not client.pending(), "told REJECT before the journal held it poisoned"
        assert stored_state(path, msgid) == before  # ...not on disk yet
        faulty.full = False
        # REJECT naming the job: ``answer`` checks the frame after its own msgid.
        assert answer(router, client, msgid) == "REJECT"
        assert stored_state(path, msgid) == POISONED
    finally:
        client.close()
        worker.close()
        router.close()
