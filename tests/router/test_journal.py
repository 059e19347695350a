"""The router's journal (SQLite on disk) without sockets: states, order, recovery, locking."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from django_eventmq.errors import ConfigurationError
from django_eventmq.protocol.batch import pack_jobs
from django_eventmq.router.dedup import FinishedWindow
from django_eventmq.router.journal.store import (
    DELAYED,
    LEASED,
    MEMORY,
    POISONED,
    WAITING,
    Journal,
    new_row,
    parcel_digest,
    resolve_path,
)


def add(journal: Journal, seq: int, **overrides: Any) -> bool:
    values: dict[str, Any] = {
        "seq": seq,
        "msgid": f"m{seq}",
        "queue": "default",
        "priority": 0,
        "state": WAITING,
        "guarantee": True,
        "headers": b"guarantee",
        "body": b'["run", {}]',
        "client": b"client-1",
        "accepted": 1000.0 + seq,
    }
    on_disk = overrides.pop("on_disk", False)
    values.update(overrides)
    return journal.add(new_row(**values), on_disk=on_disk)


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "journal.sqlite3")


def test_a_job_is_stored_once_per_msgid_and_read_back_whole(path: str) -> None:
    journal = Journal(path)
    try:
        assert add(journal, 1) is True
        assert add(journal, 2, msgid="m1") is False  # the same msgid is the same job
        journal.commit()
        rows = journal.waiting("default", None, 10)
        assert [(r.seq, r.msgid, r.headers, r.body, r.client) for r in rows] == [
            (1, "m1", b"guarantee", b'["run", {}]', b"client-1")
        ]
        assert journal.syncs == 1
        assert journal.commit() is False  # nothing to commit: no sync
    finally:
        journal.close()


def test_waiting_order_is_priority_then_age_and_pages_by_key(path: str) -> None:
    journal = Journal(path)
    try:
        for seq, prio in [(1, 0), (2, 5), (3, 0), (4, -1), (5, 5)]:
            add(journal, seq, priority=prio)
        add(journal, 6, state=LEASED)
        add(journal, 7, queue="other")
        first = journal.waiting("default", None, 2)
        assert [r.msgid for r in first] == ["m2", "m5"]
        last = first[-1]
        rest = journal.waiting("default", (last.nprio, last.seq), 10)
        assert [r.msgid for r in rest] == ["m1", "m3", "m4"]
    finally:
        journal.close()


def test_committed_jobs_survive_reopening_and_leased_ones_wait_again(path: str) -> None:
    journal = Journal(path)
    add(journal, 1)
    add(journal, 2, state=LEASED)
    add(journal, 3, state=LEASED)
    journal.commit()
    journal.delete(3)  # finished, but never committed: as if the router died here
    journal.db.close()  # no commit
    journal._unlock()

    again = Journal(path)
    try:
        assert again.recover() == 2
        assert [r.msgid for r in again.waiting("default", None, 10)] == ["m1", "m2", "m3"]
        assert again.max_seq() == 3
        assert again.counts()[WAITING] == {"default": 3}
    finally:
        again.close()


def test_delayed_jobs_come_due_in_time_order(path: str) -> None:
    journal = Journal(path)
    try:
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
    finally:
        journal.close()


def test_poisoned_jobs_are_listed_with_their_reason(path: str) -> None:
    journal = Journal(path)
    try:
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
    finally:
        journal.close()


def test_a_second_router_cannot_open_the_same_journal(path: str) -> None:
    journal = Journal(path)
    try:
        with pytest.raises(ConfigurationError, match="in use by another router"):
            Journal(path)
    finally:
        journal.close()
    Journal(path).close()  # free again once closed


def test_size_and_emptiness(path: str) -> None:
    journal = Journal(path)
    try:
        assert journal.is_empty()
        add(journal, 1, body=b"[" + b"x" * 10_000 + b"]")
        journal.commit()
        assert journal.size_bytes() > 10_000
        assert not journal.is_empty()
    finally:
        journal.close()


def test_memory_journal_behaves_the_same_without_a_file(tmp_path: Path) -> None:
    journal = Journal(MEMORY)
    try:
        assert add(journal, 1) and not add(journal, 2, msgid="m1")
        journal.commit()
        assert [r.msgid for r in journal.waiting("default", None, 5)] == ["m1"]
        assert journal.size_bytes() > 0
    finally:
        journal.close()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("template", "address", "expected"),
    [
        ("var/j-{frontend}.db", "tcp://127.0.0.1:47291", "var/j-127.0.0.1-47291.db"),
        ("var/j-{frontend}.db", "ipc:///run/emq.sock", "var/j-run-emq.sock.db"),
        ("/data/journal.db", "tcp://127.0.0.1:1", "/data/journal.db"),
    ],
)
def test_journal_path_names_the_frontend(template: str, address: str, expected: str) -> None:
    assert resolve_path(template, address) == expected


# -- finished msgids and kept SCHEDULEs -----------------------------------------------


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_finished_msgid_is_forgotten_after_the_window_even_if_nothing_else_finishes(
    path: str,
) -> None:
    """No later finish prunes it: the lookup itself must see the window is over."""
    clock = Clock(10_000.0)
    journal = Journal(path)
    try:
        window = FinishedWindow(journal, keep=100, window=60.0, clock=clock)
        window.add("old")
        clock.now += 59
        assert "old" in window  # a resend now is a duplicate
        clock.now += 2
        assert "old" not in window  # a resend now is a new job
        assert len(window) == 0
    finally:
        journal.close()


def test_finished_msgids_are_kept_across_reopening_within_window_and_count(path: str) -> None:
    clock = Clock(10_000.0)
    journal = Journal(path)
    try:
        window = FinishedWindow(journal, keep=3, window=60.0, clock=clock)
        for n in range(5):
            clock.now += 1
            window.add(f"m{n}")
        journal.commit()
        # At most ``keep`` in memory and, once pruned in a commit, on disk.
        assert [m for m in ("m0", "m1", "m2", "m3", "m4") if m in window] == ["m2", "m3", "m4"]
        assert journal.finished_count() == 3
    finally:
        journal.close()

    journal = Journal(path)
    try:
        clock.now += 30
        reopened = FinishedWindow(journal, keep=3, window=60.0, clock=clock)
        assert reopened.load() == 3 and "m4" in reopened and "m1" not in reopened
        # Past the window: m2..m4 finished at 10,003..10,005; now 10,064.5.
        clock.now = 10_064.5
        assert FinishedWindow(journal, keep=3, window=60.0, clock=clock).load() == 1
    finally:
        journal.close()


def test_old_finished_msgids_are_pruned_from_disk_in_a_commit(path: str) -> None:
    journal = Journal(path)
    try:
        journal.keep_finished(1000, 60.0)
        real_now = time.time()
        for n in range(10):
            journal.add_finished(f"old{n}", real_now - 120)  # finished two minutes ago
        journal.add_finished("young", real_now)
        journal.commit()
        assert journal.finished_count() == 1
        assert journal.finished_since(0) == [("young", real_now)]
        assert not journal.is_empty()  # a finished msgid is worth keeping the file for
    finally:
        journal.close()


def test_nothing_is_remembered_when_the_window_is_off(path: str) -> None:
    journal = Journal(path)
    try:
        window = FinishedWindow(journal, keep=100, window=0.0)
        window.add("m1")
        journal.commit()
        assert "m1" not in window and journal.finished_count() == 0
    finally:
        journal.close()


def test_kept_schedules_come_back_whole_in_order_and_unschedule_drops_its_job(
    path: str,
) -> None:
    frames_a = [b"", b"eMQP/1.0", b"SCHEDULE", b"id-a", b"q", b"", b"60", b"[1]", b""]
    frames_b = [b"", b"eMQP/1.0", b"SCHEDULE", b"id-b", b"q", b"", b"", b"[2]", b"* * * * *"]
    frames_u = [b"", b"eMQP/1.0", b"UNSCHEDULE", b"id-u", b"q", b"", b"[2]"]
    journal = Journal(path)
    try:
        journal.add_schedule(frames_a, unschedule=False, job_key="A", timing_key="60")
        journal.add_schedule(frames_b, unschedule=False, job_key="B", timing_key="cron")
        journal.add_schedule(frames_b, unschedule=False, job_key="B", timing_key="other")
        assert journal.drop_schedules("B", "cron") == 1  # one timing of job B
        # Kept, an UNSCHEDULE drops every timing of its job left, in the same write.
        assert journal.keep_unschedule(frames_u, "B", "") == 1
        journal.commit()
    finally:
        journal.close()
    journal = Journal(path)
    try:
        kept = journal.schedules()
        assert [(u, f) for _, u, f in kept] == [(False, frames_a), (True, frames_u)]
        assert journal.drop_schedules("B", "") == 0  # an UNSCHEDULE is never dropped
        journal.delete_schedule(kept[0][0])
        journal.commit()
        assert journal.schedule_count() == 1 and not journal.is_empty()
    finally:
        journal.close()


def test_a_parcel_counts_as_its_jobs_and_opens_into_rows_minus_the_held_ones(path: str) -> None:
    body = b'["run", {}]'
    frame = pack_jobs([(b"p%d" % i, b"email", b"guarantee", body) for i in range(5)])
    journal = Journal(path)
    try:
        add(journal, 1, msgid="p3", queue="email")  # held already: the parcel's copy is dropped
        journal.add_parcel(10, 5, "email", 2, True, b"guarantee", b"client-9", 1234.5, frame)
        journal.commit()
        assert not journal.is_empty()
        assert journal.counts()[WAITING] == {"email": 6}
        assert journal.max_seq() == 14
        assert journal.parcels_holding("p4") == [10] and journal.parcels_holding("zz") == []
        assert journal.next_parcel("email", (-2, 9)) is None  # its first job comes later
        assert journal.next_parcel("email", (-2, 10)) == 10
        assert journal.next_parcel("other", None) is None
    finally:
        journal.close()
    journal = Journal(path)  # reopened: the parcel is still there and known
    try:
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
    finally:
        journal.close()


def test_a_parcel_is_known_by_its_frame_until_it_is_opened(path: str) -> None:
    """The same BATCH sent again is found by the digest of its JOBS frame, across
    a restart, and only while the parcel is held (its jobs are then held)."""
    body = b'["run", {}]'
    frame = pack_jobs([(b"p%d" % i, b"email", b"guarantee", body) for i in range(5)])
    other = pack_jobs([(b"p%d" % i, b"email", b"guarantee", body) for i in range(4)])
    journal = Journal(path)
    try:
        assert not journal.holds_parcel(parcel_digest(frame))  # no parcel at all
        journal.add_parcel(10, 5, "email", 0, True, b"guarantee", b"c", 1.0, frame)
        add(journal, 1, msgid="row-1", queue="email")  # kept in memory, not written yet
        assert journal.holds_row("row-1") and not journal.holds_row("p1")
        journal.commit()
    finally:
        journal.close()
    journal = Journal(path)
    try:
        assert journal.holds_parcel(parcel_digest(frame))
        assert not journal.holds_parcel(parcel_digest(other))
        assert journal.holds_row("row-1") and not journal.holds_row("p1")
        journal.open_parcel(10, skip=set())
        journal.commit()
        assert not journal.holds_parcel(parcel_digest(frame))
        assert journal.holds_row("p1")
    finally:
        journal.close()


def test_a_digest_whose_parcel_is_gone_does_not_pass_its_batch_for_held(path: str) -> None:
    """--journal-recover copies the rows it can read: a parcel's big JOBS blob may
    be lost while its small digest row is copied. The same BATCH sent again (what
    an operator does to recover it) must then be stored, not ACKed as held."""
    frame = pack_jobs([(b"p%d" % i, b"email", b"guarantee", b"[]") for i in range(5)])
    journal = Journal(path)
    try:
        journal.add_parcel(10, 5, "email", 0, True, b"guarantee", b"c", 1.0, frame)
        journal.add_parcel(20, 1, "other", 0, True, b"guarantee", b"c", 1.0, b"x")
        journal.commit()
        journal.db.execute("DELETE FROM parcels WHERE seq = 10")  # what salvage lost
        journal.db.commit()
    finally:
        journal.close()
    journal = Journal(path)
    try:
        assert journal.parcel_count() == 1  # another parcel is held
        assert not journal.holds_parcel(parcel_digest(frame))
        journal.add_parcel(30, 5, "email", 0, True, b"guarantee", b"c", 2.0, frame)
        journal.commit()
        assert journal.holds_parcel(parcel_digest(frame))  # the new parcel is known
        journal.open_parcel(30, skip=set())
        journal.commit()
        assert not journal.holds_parcel(parcel_digest(frame))
    finally:
        journal.close()


def test_a_msgid_freed_in_the_same_commit_is_stored_again_kept_or_at_once(path: str) -> None:
    """With the finished window off, a finished job's msgid may come back as a new job
    before the commit that deletes the old row (a resend whose ACK crossed, a
    cancel then a new send): the new row must be stored, whether it is kept for
    the commit or inserted at once (jobs on disk only), not dropped as held."""
    journal = Journal(path)
    try:
        reuse_freed_msgids(journal)
        rows = journal.db.execute("SELECT seq, msgid FROM jobs ORDER BY seq").fetchall()
        assert rows == [(3, "m1"), (4, "m2")]
    finally:
        journal.close()


def reuse_freed_msgids(journal: Any) -> None:
    """Jobs m1 and m2 stored, then each deleted and its msgid sent again as a new job
    (seqs 3 and 4) before the commit that deletes the old rows."""
    add(journal, 1)
    add(journal, 2)
    assert journal.commit()
    journal.delete(1)
    assert add(journal, 3, msgid="m1")  # kept for the commit
    journal.delete(2)
    assert add(journal, 4, msgid="m2", on_disk=True)  # inserted at once
    assert journal.commit()
