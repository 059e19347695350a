"""A REQUEST that arrives while some held jobs are on disk only: its row is kept
for the group write unless its msgid may be stored (:class:`.dedup.StoredMsgids`),
and a resend of a job held on disk only is still a duplicate, whichever way
the job got there (spilled past the window, delayed, read back after a
restart, opened from a parcel)."""

from __future__ import annotations

from pathlib import Path

from django_eventmq.protocol import parse_headers
from django_eventmq.router.book import Book
from django_eventmq.router.dedup import RESTART_AFTER, StoredMsgids
from django_eventmq.router.journal.store import Journal
from tests.router.test_journal import parcel
from tests.router.test_unique import make_book

BODY = b'["run", {}]'


def frames(msgid: str, headers: str) -> list[bytes]:
    return [b"", b"eMQP/1.0", b"REQUEST", msgid.encode(), b"q", headers.encode(), BODY]


def accept(book: Book, msgid: str, headers: str = "guarantee") -> bool:
    return book.accept(b"c", frames(msgid, headers), msgid, "q", parse_headers(headers), 1.0)


def open_book(path: Path, window: int = 2) -> tuple[Book, Journal]:
    journal = Journal(str(path))
    book, _sent, _told = make_book(journal, queue_window=window)
    book.recover()
    return book, journal


def test_the_filter_never_forgets_a_msgid_it_was_given() -> None:
    stored = StoredMsgids()
    assert stored.may_hold("anything")  # full until started from what is held
    stored.restart(["a", "b"])
    msgids = [f"m{i}" for i in range(10_000)]
    for msgid in msgids:
        stored.add(msgid)
    assert all(stored.may_hold(msgid) for msgid in ["a", "b", *msgids])
    # Never stored: almost all are told apart (2 bits of 16 Mi per msgid).
    assert sum(stored.may_hold(f"x{i}") for i in range(10_000)) < 10
    assert not stored.stale()
    stored.added = RESTART_AFTER + 1
    assert stored.stale()


def test_a_new_msgid_is_kept_for_the_group_write_while_jobs_wait_on_disk(
    tmp_path: Path,
) -> None:
    book, journal = open_book(tmp_path / "j.sqlite3")
    for msgid in ("m1", "m2", "m3"):
        assert accept(book, msgid)
    journal.commit()
    assert book._some_only_on_disk()  # m3 waits on disk only (window 2)
    assert accept(book, "m4")
    assert any(row[1] == "m4" for row in journal._new.values())  # not inserted at once
    journal.commit()
    assert not accept(book, "m3") and not accept(book, "m4")  # on disk only: duplicates
    assert book.duplicates == 2
    journal.commit()
    assert journal.counts()[0]["q"] == 4


def test_a_job_read_back_after_a_restart_and_delayed_is_still_a_duplicate(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.sqlite3"
    book, journal = open_book(path, window=10)
    for msgid in ("m1", "m2"):
        assert accept(book, msgid)
    journal.close()
    # After a restart the filter knows no msgid: it starts again from the
    # jobs in memory once every held job is there.
    book, journal = open_book(path, window=10)
    assert book.stored_msgids.full
    book.routing.add_worker(b"jm", ((10, "q"),), 0.0)
    book.reports.ready(b"jm", 1.0)  # reads m1 and m2 back, hands them out
    journal.commit()
    assert accept(book, "m3")  # everything in memory: the filter starts again
    assert not book.stored_msgids.full
    book.reports.done(b"jm", "m1", "retry", "{}", 2.0)  # no retry-count: finished
    assert not accept(book, "m1")  # finished recently
    book.reports.done(b"jm", "m2", "died", "worker died", 2.0)
    journal.commit()
    assert book.poisoned.by_queue["q"] == 1  # poison_after=1: set aside, on disk only
    assert book._some_only_on_disk()
    assert not accept(book, "m2")  # held on disk only: a duplicate
    journal.commit()
    assert journal.find("m2") is not None


def test_a_resend_of_a_job_from_an_opened_parcel_is_a_duplicate(tmp_path: Path) -> None:
    book, journal = open_book(tmp_path / "j.sqlite3")
    for msgid in ("m1", "m2", "m3"):
        assert accept(book, msgid)
    journal.commit()
    journal.add_parcel(parcel(10, 3, parcel_frame(), queue="q"))
    book.routing.waiting.queue("q").wait_on_disk(3)
    book._seq = 12
    book.open_parcel(10)
    journal.commit()
    assert book.stored_msgids.full
    assert not accept(book, "p2")  # a job of the opened parcel, on disk only
    assert book.duplicates == 1


def parcel_frame() -> bytes:
    from django_eventmq.protocol.batch import pack_jobs

    return pack_jobs([(f"p{i}".encode(), b"q", b"guarantee", BODY) for i in range(1, 4)])
