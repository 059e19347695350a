"""The router's journals, SQLite and PostgreSQL, against one suite: each test runs
with both (the ``journal`` fixture's parameter). What only one backend does is
tested in tests/router/test_journal.py (SQLite: the file, its lock, the memory
journal) and tests/router/journal_pg/ (PostgreSQL: its transaction, schema,
fencing)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from django_eventmq.protocol.batch import pack_jobs
from django_eventmq.router.dedup import FinishedWindow
from django_eventmq.router.journal.parcels import parcel_digest
from django_eventmq.router.journal.schema import DELAYED, LEASED, POISONED, WAITING
from django_eventmq.router.journal.store import Journal
from tests.pg_support import pg_dsn as pg_dsn
from tests.pg_support import pg_group as pg_group
from tests.router.test_journal import add, parcel

#: ``open_journal(**options)``: a journal of the backend under test; opened again,
#: the same store (the SQLite file, the PostgreSQL group).
Opener = Callable[..., Any]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def open_journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """Each test once per backend; the journals it opened are closed after it (a
    PostgreSQL one in a group of its own, as tests/router/journal_pg/ does)."""
    opened: list[Any] = []
    if request.param == "sqlite":
        path = str(tmp_path / "journal.sqlite3")

        def opener(**options: Any) -> Any:
            journal = Journal(path, **options)
            opened.append(journal)
            return journal

    else:
        from django_eventmq.router.journal.postgres import PostgresJournal

        dsn = request.getfixturevalue("pg_dsn")
        group = request.getfixturevalue("pg_group")

        def opener(**options: Any) -> Any:
            journal = PostgresJournal(dsn, group=group, **options)
            opened.append(journal)
            return journal

    yield opener
    for journal in opened:
        if not journal.closed:
            journal.close()


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_job_is_stored_once_per_msgid_and_read_back_whole(open_journal: Opener) -> None:
    journal = open_journal()
    assert add(journal, 1) is True
    assert add(journal, 2, msgid="m1") is False  # the same msgid is the same job
    assert journal.commit() is True
    rows = journal.waiting("default", None, 10)
    assert [(r.seq, r.msgid, r.headers, r.body, r.client, r.guarantee) for r in rows] == [
        (1, "m1", b"guarantee", b'["run", {}]', b"client-1", True)
    ]
    assert journal.syncs == 1
    assert journal.commit() is False  # nothing to commit: no transaction
    assert journal.syncs == 1


def test_waiting_order_is_priority_then_age_and_pages_by_key(open_journal: Opener) -> None:
    journal = open_journal()
    for seq, prio in [(1, 0), (2, 5), (3, 0), (4, -1), (5, 5)]:
        add(journal, seq, priority=prio)
    add(journal, 6, state=LEASED)
    add(journal, 7, queue="other")
    first = journal.waiting("default", None, 2)
    assert [r.msgid for r in first] == ["m2", "m5"]
    last = first[-1]
    rest = journal.waiting("default", (last.nprio, last.seq), 10)
    assert [r.msgid for r in rest] == ["m1", "m3", "m4"]


def test_delayed_jobs_come_due_in_time_order(open_journal: Opener) -> None:
    journal = open_journal()
    add(journal, 1, state=DELAYED, due=200.0)
    add(journal, 2, state=DELAYED, due=100.0)
    assert journal.next_due() == 100.0
    assert journal.take_due(50.0) == []
    assert [r.msgid for r in journal.take_due(150.0)] == ["m2"]
    assert journal.next_due() == 200.0
    assert [r.msgid for r in journal.waiting("default", None, 10)] == ["m2"]
    journal.delay(2, 300.0, attempts=1)
    assert [r.msgid for r in journal.take_due(1000.0)] == ["m1", "m2"]
    assert journal.next_due() is None


def test_poisoned_jobs_are_listed_with_their_reason(open_journal: Opener) -> None:
    journal = open_journal()
    add(journal, 1, state=LEASED)
    journal.poison(1, deaths=3, reason="poisoned: its worker died, 3 time(s)")
    (row, reason), *more = journal.poisoned()
    assert (row.msgid, row.deaths, more) == ("m1", 3, [])
    assert "3 time(s)" in reason
    assert journal.counts()[POISONED] == {"default": 1}
    found = journal.find("m1")
    assert found is not None and found[0] == POISONED
    assert journal.find("nope") is None
    assert journal.recover() == 0  # poisoned jobs are not handed out again


def test_size_and_emptiness(open_journal: Opener) -> None:
    journal = open_journal()
    assert journal.is_empty()
    before = journal.size_bytes()
    add(journal, 1, body=b"[" + b"x" * 100_000 + b"]")
    journal.commit()
    assert journal.size_bytes() > before
    assert not journal.is_empty()


def test_finished_msgids_are_kept_across_reopening_within_window_and_count(
    open_journal: Opener,
) -> None:
    clock = Clock(10_000.0)
    journal = open_journal()
    window = FinishedWindow(journal, keep=3, window=60.0, clock=clock)
    for n in range(5):
        clock.now += 1
        window.add(f"m{n}")
    journal.commit()
    assert [m for m in ("m0", "m1", "m2", "m3", "m4") if m in window] == ["m2", "m3", "m4"]
    assert journal.finished_count() == 3
    journal.close()

    journal = open_journal()
    clock.now += 30
    reopened = FinishedWindow(journal, keep=3, window=60.0, clock=clock)
    assert reopened.load() == 3 and "m4" in reopened and "m1" not in reopened
    clock.now = 10_064.5  # m2..m4 finished at 10,003..10,005
    assert FinishedWindow(journal, keep=3, window=60.0, clock=clock).load() == 1


def test_old_finished_msgids_are_pruned_in_a_commit(open_journal: Opener) -> None:
    journal = open_journal()
    journal.keep_finished(1000, 60.0)
    real_now = time.time()
    for n in range(10):
        journal.add_finished(f"old{n}", real_now - 120)  # finished two minutes ago
    journal.add_finished("young", real_now)
    journal.commit()
    assert journal.finished_count() == 1
    assert journal.finished_since(0) == [("young", real_now)]
    assert not journal.is_empty()


def test_nothing_is_remembered_when_the_window_is_off(open_journal: Opener) -> None:
    journal = open_journal()
    window = FinishedWindow(journal, keep=100, window=0.0)
    window.add("m1")
    journal.commit()
    assert "m1" not in window and journal.finished_count() == 0


def test_kept_schedules_come_back_whole_in_order_and_unschedule_drops_its_job(
    open_journal: Opener,
) -> None:
    frames_a = [b"", b"eMQP/1.0", b"SCHEDULE", b"id-a", b"q", b"", b"60", b"[1]", b""]
    frames_b = [b"", b"eMQP/1.0", b"SCHEDULE", b"id-b", b"q", b"", b"", b"[2]", b"* * * * *"]
    frames_u = [b"", b"eMQP/1.0", b"UNSCHEDULE", b"id-u", b"q", b"", b"[2]"]
    journal = open_journal()
    journal.add_schedule(frames_a, unschedule=False, job_key="A", timing_key="60")
    journal.add_schedule(frames_b, unschedule=False, job_key="B", timing_key="cron")
    journal.add_schedule(frames_b, unschedule=False, job_key="B", timing_key="other")
    assert journal.drop_schedules("B", "cron") == 1
    # Kept, an UNSCHEDULE drops every timing of its job left, in the same write.
    assert journal.keep_unschedule(frames_u, "B", "") == 1
    journal.commit()
    journal.close()
    journal = open_journal()
    kept = journal.schedules()
    assert [(u, f) for _, u, f in kept] == [(False, frames_a), (True, frames_u)]
    assert journal.drop_schedules("B", "") == 0  # an UNSCHEDULE is never dropped
    journal.delete_schedule(kept[0][0])
    journal.commit()
    assert journal.schedule_count() == 1 and not journal.is_empty()


def test_a_parcel_counts_as_its_jobs_and_opens_into_rows_minus_the_held_ones(
    open_journal: Opener,
) -> None:
    body = b'["run", {}]'
    frame = pack_jobs([(b"p%d" % i, b"email", b"guarantee", body) for i in range(5)])
    journal = open_journal()
    add(journal, 1, msgid="p3", queue="email")  # held already: the parcel's copy is dropped
    journal.add_parcel(parcel(10, 5, frame, priority=2, client=b"client-9", accepted=1234.5))
    journal.commit()
    assert not journal.is_empty()
    assert journal.counts()[WAITING] == {"email": 6}
    assert journal.max_seq() == 14
    assert journal.parcels_holding("p4") == [10] and journal.parcels_holding("zz") == []
    assert journal.next_parcel("email", (-2, 9)) is None
    assert journal.next_parcel("email", (-2, 10)) == 10
    assert journal.next_parcel("other", None) is None
    journal.close()
    journal = open_journal()  # reopened: the parcel is still there and known
    assert journal.parcel_count() == 1
    assert journal.open_parcel(10, skip={"p0"}) == ("email", 2)
    journal.commit()
    rows = journal.waiting("email", None, 10)
    assert [(r.seq, r.msgid, r.nprio) for r in rows] == [
        (11, "p1", -2),
        (12, "p2", -2),
        (14, "p4", -2),
        (1, "p3", 0),
    ]
    assert (rows[0].headers, rows[0].body, rows[0].client, rows[0].accepted) == (
        b"guarantee",
        body,
        b"client-9",
        1234.5,
    )
    assert journal.parcel_count() == 0 and journal.next_parcel("email", None) is None
    assert journal.counts()[WAITING] == {"email": 4}


def test_a_parcel_is_known_by_its_frame_until_it_is_opened(open_journal: Opener) -> None:
    body = b'["run", {}]'
    frame = pack_jobs([(b"p%d" % i, b"email", b"guarantee", body) for i in range(5)])
    other = pack_jobs([(b"p%d" % i, b"email", b"guarantee", body) for i in range(4)])
    journal = open_journal()
    assert not journal.holds_parcel(parcel_digest(frame))
    journal.add_parcel(parcel(10, 5, frame))
    add(journal, 1, msgid="row-1", queue="email")
    assert journal.holds_row("row-1") and not journal.holds_row("p1")
    journal.commit()
    journal.close()
    journal = open_journal()
    assert journal.holds_parcel(parcel_digest(frame))
    assert not journal.holds_parcel(parcel_digest(other))
    journal.open_parcel(10, skip=set())
    journal.commit()
    assert not journal.holds_parcel(parcel_digest(frame))
    assert journal.holds_row("p1")
