"""STATUS ``poisoned_messages`` asks the journal only when the book counts poisoned
jobs: with none, the writes kept for the group commit stay kept."""

from __future__ import annotations

from pathlib import Path

from django_eventmq.router import admin_socket
from tests.router.test_stored_msgids import accept, open_book


def test_no_poisoned_job_counted_no_journal_read(tmp_path: Path) -> None:
    book, journal = open_book(tmp_path / "j.sqlite3")
    assert accept(book, "m1")
    assert admin_socket.poisoned(book) == []
    assert journal._kept()  # not flushed by the STATUS


def test_poisoned_jobs_are_listed(tmp_path: Path) -> None:
    book, journal = open_book(tmp_path / "j.sqlite3")
    book.routing.add_worker(b"jm", ((10, "q"),), 0.0)
    book.reports.ready(b"jm", 1.0)
    assert accept(book, "m1")
    book.reports.done(b"jm", "m1", "died", "worker died", 2.0)  # poison_after=1
    assert [entry["msgid"] for entry in admin_socket.poisoned(book)] == ["m1"]
    journal.close()
    book, journal = open_book(tmp_path / "j.sqlite3")  # counted again after a restart
    assert [entry["msgid"] for entry in admin_socket.poisoned(book)] == ["m1"]
