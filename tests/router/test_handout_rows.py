"""A job handed out from a row already on disk is not written again (its row
stays WAITING: ``Journal.lease``); the router knows it is in flight, so a later
load of waiting rows skips it, and a restart makes it wait again."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from django_eventmq.protocol import parse_headers
from django_eventmq.router.journal.store import LEASED, WAITING, Journal
from tests.router.test_stored_msgids import accept, frames
from tests.router.test_unique import make_book


def test_a_hand_out_of_a_stored_job_writes_nothing(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path / "j.sqlite3"))
    book, sent, _told = make_book(journal, queue_window=10)
    book.recover()
    assert accept(book, "m1")
    journal.commit()
    book.routing.add_worker(b"jm", ((10, "q"),), 0.0)
    book.ready(b"jm", 1.0)
    assert [job.msgid for job in sent] == ["m1"]
    assert not journal.pending  # no UPDATE for the hand-out
    found = journal.find("m1")
    assert found is not None and found[0] == WAITING
    journal.close()
    # After a restart it waits again, as every job handed out and not finished.
    journal = Journal(str(tmp_path / "j.sqlite3"))
    book, sent, _told = make_book(journal, queue_window=10)
    book.recover()
    book.routing.add_worker(b"jm", ((10, "q"),), 0.0)
    book.ready(b"jm", 1.0)
    assert [job.msgid for job in sent] == ["m1"]
    journal.close()


def test_a_job_new_in_the_commit_is_stored_leased(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path / "j.sqlite3"))
    book, _sent, _told = make_book(journal, queue_window=10)
    book.recover()
    assert accept(book, "m1")  # kept, not written yet
    book.routing.add_worker(b"jm", ((10, "q"),), 0.0)
    book.ready(b"jm", 1.0)
    journal.commit()
    found = journal.find("m1")
    assert found is not None and found[0] == LEASED
    journal.close()


def test_a_load_after_the_window_was_cut_back_skips_jobs_in_flight(tmp_path: Path) -> None:
    """The in-memory window cut back to higher-priority jobs (``_trim``) puts the
    boundary before a job handed out earlier: its WAITING row comes after it."""
    journal = Journal(str(tmp_path / "j.sqlite3"))
    book, sent, _told = make_book(journal, queue_window=2)
    book.recover()
    for msgid in ("j1", "j2", "j3"):
        assert accept(book, msgid)  # j3 waits on disk only
    journal.commit()
    book.routing.add_worker(b"w1", ((1, "q"),), 0.0)
    book.ready(b"w1", 1.0)
    assert [job.msgid for job in sent] == ["j1"]
    journal.commit()
    urgent = [f"p{i}" for i in range(1, 6)]
    for msgid in urgent:  # before every waiting job: the window keeps p1, p2
        assert book.accept(
            b"c", frames(msgid, "priority:5"), msgid, "q", parse_headers("priority:5"), 1.0
        )
    journal.commit()
    assert book.routing.waiting.queue("q").boundary < (0, 1)
    book.routing.add_worker(b"w2", ((20, "q"),), 0.0)
    for _ in range(10):  # a READY a slot
        book.ready(b"w2", 2.0)
    handed = Counter(job.msgid for job in sent)
    assert handed == Counter(["j1", *urgent, "j2", "j3"])  # j1 once: it runs on w1
    assert book.routing.waiting.total() == 0
    book.done(b"w1", "j1", "ok", "{}", 3.0)
    journal.commit()
    assert journal.find("j1") is None
    journal.close()
