"""Unique keys read back from either journal after a restart (``unique_rows``: held
jobs with the header, picked in SQL; delayed ones included, poisoned ones not), and
a poisoned job retried from the admin holding its key again."""

from __future__ import annotations

import time

from django_eventmq.protocol.unique import holder_of
from django_eventmq.router.journal.schema import DELAYED, LEASED, WAITING
from tests.pg_support import pg_dsn as pg_dsn  # fixtures of the postgres journal
from tests.pg_support import pg_group as pg_group
from tests.router.test_journal import add
from tests.router.test_poisoned_journal import Reopen
from tests.router.test_poisoned_journal import reopen as reopen  # either journal
from tests.router.test_unique import KEY, OTHER, accept, make_book, unique, with_worker

THIRD = "0123456789abcdef" * 4


def headers(key: str, more: str = "guarantee") -> bytes:
    return f"{more},unique-key:{key},unique-for:60".encode()


def test_unique_rows_are_the_held_jobs_with_a_key(reopen: Reopen) -> None:
    journal = reopen()
    add(journal, 1, headers=headers(KEY))  # type: ignore[arg-type]  # any journal will do
    add(journal, 2, headers=b"guarantee,reply-requested")  # type: ignore[arg-type]
    add(journal, 3, state=LEASED, headers=headers(OTHER))  # type: ignore[arg-type]
    add(journal, 4, state=DELAYED, due=time.time() + 600, headers=headers(THIRD))  # type: ignore[arg-type]
    add(journal, 5, state=LEASED, headers=headers("f" * 16))  # type: ignore[arg-type]
    journal.poison(5, deaths=3, reason="poisoned: its worker died, 3 time(s)")
    add(journal, 6, headers=b"guarantee,x-unique-key-of:1")  # type: ignore[arg-type]
    kept = journal.unique_rows()  # the kept writes are read too
    journal.commit()
    journal = reopen()
    rows = journal.unique_rows()
    assert rows == kept
    assert [(msgid, raw, accepted) for msgid, raw, accepted in rows] == [
        ("m1", headers(KEY), 1001.0),
        ("m3", headers(OTHER), 1003.0),
        ("m4", headers(THIRD), 1004.0),
    ]
    journal.set_state(1, WAITING)  # nothing else is changed by reading them
    assert journal.counts()[WAITING] == {"default": 3}


def test_a_job_delayed_over_a_restart_refuses_a_duplicate_before_it_is_due(
    reopen: Reopen,
) -> None:
    book, _sent, _told = make_book(reopen())
    accept(book, "later", f"delay-until:{time.time() + 600},unique-key:{KEY}")
    assert book.delays.delayed == {"q": 1}
    book.journal.commit()
    again, _sent, _told = make_book(reopen())
    again.recover()
    reason = again.unique.refusal("dup", "q", unique())
    assert reason is not None and holder_of(reason) == "later"
    assert len(again.unique) == 1
    again.journal.close()  # before the group's schema is dropped


def test_a_poisoned_job_holds_no_key_after_a_restart(reopen: Reopen) -> None:
    book, _sent, _told = make_book(reopen())  # poison_after=1
    accept(book, "bad")
    with_worker(book)
    book.outcomes.worker_failed(b"jm", "went silent")
    assert book.poisoned.by_queue == {"q": 1}
    book.journal.commit()
    again, _sent, _told = make_book(reopen())
    again.recover()
    assert again.poisoned.by_queue == {"q": 1} and len(again.unique) == 0
    assert again.unique.refusal("new", "q", unique()) is None
    again.journal.close()


def test_a_poisoned_job_retried_from_the_admin_holds_its_key_again(reopen: Reopen) -> None:
    book, sent, _told = make_book(reopen())  # poison_after=1
    accept(book, "bad")
    with_worker(book)
    book.outcomes.worker_failed(b"jm", "went silent")
    assert book.unique.holder(KEY) is None  # freed when set aside
    assert book.poisoned.retry(["bad"], 2.0) == ["bad"]
    reason = book.unique.refusal("dup", "q", unique())
    assert reason is not None and holder_of(reason) == "bad"
    with_worker(book)  # handed out again, still holding it
    assert [job.msgid for job in sent] == ["bad", "bad"]
    assert book.unique.holder(KEY) == "bad"
    book.journal.close()


def test_a_retried_poisoned_job_leaves_a_key_taken_since_to_its_new_holder(
    reopen: Reopen,
) -> None:
    book, _sent, _told = make_book(reopen())
    accept(book, "bad")
    with_worker(book)
    book.outcomes.worker_failed(b"jm", "went silent")
    accept(book, "new")  # took the freed key
    book.poisoned.retry(["bad"], 2.0)
    assert book.unique.holder(KEY) == "new"
    book.journal.close()
