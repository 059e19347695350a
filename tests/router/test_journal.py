"""What only the SQLite journal does, without sockets: the file, its lock, recovery
after a crash, the memory journal. What both journals keep is
tests/router/test_journal_backends.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from django_eventmq.errors import ConfigurationError
from django_eventmq.protocol.batch import pack_jobs
from django_eventmq.router.dedup import FinishedWindow
from django_eventmq.router.journal.schema import Parcel
from django_eventmq.router.journal.store import (
    LEASED,
    MEMORY,
    WAITING,
    Journal,
    new_row,
    parcel_digest,
    resolve_path,
)


def add(journal: Journal, seq: int, **overrides: Any) -> bool:
    on_disk = overrides.pop("on_disk", False)
    return journal.add(row(seq, **overrides), on_disk=on_disk)


def row(seq: int, **overrides: Any) -> list[Any]:
    """A new job's values (:func:`new_row`): job ``m<seq>`` of queue default, unless
    ``overrides`` say otherwise."""
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
    values.update(overrides)
    return new_row(**values)


def parcel(
    seq: int,
    count: int,
    jobs: bytes,
    *,
    queue: str = "email",
    priority: int = 0,
    client: bytes = b"c",
    accepted: float = 1.0,
) -> Parcel:
    """A guarantee parcel of ``count`` jobs (the JOBS frame ``jobs``) from ``seq``."""
    return Parcel(seq, count, queue, priority, True, b"guarantee", client, accepted, jobs)


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "journal.sqlite3")


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


def test_a_second_router_cannot_open_the_same_journal(path: str) -> None:
    journal = Journal(path)
    try:
        with pytest.raises(ConfigurationError, match="in use by another router"):
            Journal(path)
    finally:
        journal.close()
    Journal(path).close()  # free again once closed


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


def test_a_digest_whose_parcel_is_gone_does_not_pass_its_batch_for_held(path: str) -> None:
    """--journal-recover copies the rows it can read: a parcel's big JOBS blob may
    be lost while its small digest row is copied. The same BATCH sent again (what
    an operator does to recover it) must then be stored, not ACKed as held."""
    frame = pack_jobs([(b"p%d" % i, b"email", b"guarantee", b"[]") for i in range(5)])
    journal = Journal(path)
    try:
        journal.add_parcel(parcel(10, 5, frame))
        journal.add_parcel(parcel(20, 1, b"x", queue="other"))
        journal.commit()
        journal.db.execute("DELETE FROM parcels WHERE seq = 10")  # what salvage lost
        journal.db.commit()
    finally:
        journal.close()
    journal = Journal(path)
    try:
        assert journal.parcel_count() == 1  # another parcel is held
        assert not journal.holds_parcel(parcel_digest(frame))
        journal.add_parcel(parcel(30, 5, frame, accepted=2.0))
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
