"""Unique jobs in the router: the key table (router/unique.py) with a test clock, the
book's hooks (a key taken at acceptance, freed at the job's end), the journal
rebuild, and a live router's REJECT and MONITOR counts."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from django_eventmq.protocol import Headers, Message, Reject, parse_headers
from django_eventmq.protocol.batch import pack_jobs
from django_eventmq.protocol.status import JobStatus
from django_eventmq.protocol.unique import holder_of, unique_key
from django_eventmq.router.book import Book
from django_eventmq.router.journal.api import JournalLike
from django_eventmq.router.journal.store import MEMORY, Journal
from django_eventmq.router.routing import RoutedJob
from django_eventmq.router.unique import UniqueKeys
from tests.pg_support import pg_dsn as pg_dsn  # fixtures of the postgres journal
from tests.pg_support import pg_group as pg_group
from tests.router.test_expiry import Clock
from tests.router.test_poisoned_journal import reopen as reopen  # either journal
from tests.router.test_router import JOB, Harness, make_settings
from tests.support import wait_for

KEY = unique_key("jobs.report", "[[1],{}]")
OTHER = unique_key("jobs.report", "[[2],{}]")
BODY = b'["run",{"callable":"f","path":"m","args":[],"kwargs":{}}]'


def unique(key: str = KEY, seconds: int = 0) -> Headers:
    return Headers(unique_key=key, unique_for=seconds)


# -- the table ------------------------------------------------------------------------


def test_a_held_key_refuses_another_msgid_and_names_the_holder() -> None:
    table = UniqueKeys(Clock(1000.0))
    assert table.refusal("a", "q", unique()) is None  # free
    table.hold("a", unique(), 1000.0)
    reason = table.refusal("b", "q", unique())
    assert reason is not None and holder_of(reason) == "a"
    assert "queued or running" in reason
    assert table.refusal("a", "q", unique()) is None  # its own resend: not refused
    assert table.refusal("c", "q", unique(OTHER)) is None  # another key
    assert table.refusal("d", "q", Headers()) is None  # not unique
    assert table.refused == {"q": 1}
    assert table.holder(KEY) == "a" and len(table) == 1


def test_without_unique_for_the_key_is_free_when_the_job_ends() -> None:
    table = UniqueKeys(Clock(1000.0))
    table.hold("a", unique(), 1000.0)
    table.release("a")
    assert table.refusal("b", "q", unique()) is None
    assert len(table) == 0 and table.holder(KEY) is None


def test_unique_for_keeps_the_key_after_the_end_until_it_runs_out() -> None:
    clock = Clock(1000.0)
    table = UniqueKeys(clock)
    table.hold("a", unique(seconds=60), 1000.0)
    clock.now = 1010.0
    table.release("a")  # finished 10 s after acceptance: taken 50 s more
    reason = table.refusal("b", "q", unique(seconds=60))
    assert reason is not None and holder_of(reason) == "a" and "50 s more" in reason
    clock.now = 1060.0
    assert table.refusal("b", "q", unique(seconds=60)) is None
    assert len(table) == 0


def test_a_job_that_outlives_unique_for_keeps_its_key_while_held() -> None:
    clock = Clock(1000.0)
    table = UniqueKeys(clock)
    table.hold("a", unique(seconds=5), 1000.0)
    clock.now = 2000.0  # long past unique_for, still queued or running
    assert table.refusal("b", "q", unique(seconds=5)) is not None
    table.release("a")  # its window is over: freed at once
    assert table.refusal("b", "q", unique(seconds=5)) is None


def test_ended_keys_are_purged_once_their_window_passes() -> None:
    clock = Clock(1000.0)
    table = UniqueKeys(clock)
    for n in range(100):
        key = unique_key("j", str(n))
        table.hold(f"m{n}", unique(key, 10), 1000.0)
        table.release(f"m{n}")
    assert len(table) == 100
    clock.now = 1011.0
    assert len(table) == 0 and not table._ending


def test_a_release_of_a_job_that_lost_its_key_leaves_the_new_holder() -> None:
    table = UniqueKeys(Clock(1000.0))
    table.hold("old", unique(), 1000.0)
    table.hold("new", unique(), 1000.0)  # two held jobs had it (rebuilt journal)
    table.release("old")
    assert table.holder(KEY) == "new"
    table.release("unknown")  # not unique: nothing to do


def test_rebuild_takes_the_keys_of_rows_with_readable_headers() -> None:
    clock = Clock(1000.0)
    table = UniqueKeys(clock)
    rows = [
        ("a", f"guarantee,unique-key:{KEY},unique-for:30".encode(), 990.0),
        ("b", b"reply-requested", 991.0),
        ("c", b"unique-key:NOT-HEX", 992.0),  # unreadable: skipped, the job stays
        ("d", b"\xff\xfe", 993.0),
    ]
    assert table.rebuild(rows) == 1
    assert table.holder(KEY) == "a"
    table.release("a")
    clock.now = 1019.0  # accepted at 990 with 30 s: taken until 1020
    assert table.holder(KEY) == "a"
    clock.now = 1020.0
    assert table.holder(KEY) is None


# -- the book: taken at acceptance, freed at the end ------------------------------------


def make_book(
    journal: JournalLike | None = None, **settings: Any
) -> tuple[Book, list[RoutedJob], list[Message]]:
    sent: list[RoutedJob] = []
    told: list[Message] = []
    book = Book(
        make_settings(poison_after=1, **settings),
        journal or Journal(MEMORY),
        deliver=lambda worker, job: sent.append(job),
        to_client=lambda identity, message: told.append(message),
    )
    return book, sent, told


def frames(msgid: str, headers: str) -> list[bytes]:
    return [b"", b"eMQP/1.0", b"REQUEST", msgid.encode(), b"q", headers.encode(), BODY]


def accept(book: Book, msgid: str, headers: str = f"unique-key:{KEY}") -> bool:
    return book.accept(b"c", frames(msgid, headers), msgid, "q", parse_headers(headers), 1.0)


def with_worker(book: Book) -> None:
    book.routing.add_worker(b"jm", ((10, "q"),), 0.0)
    book.reports.ready(b"jm", 1.0)


@pytest.mark.parametrize("end", ["done", "cancelled", "expired", "poisoned", "reply"])
def test_the_key_is_freed_when_its_job_ends(end: str) -> None:
    book, sent, _told = make_book()
    headers = f"unique-key:{KEY}"
    if end == "expired":
        headers += f",expires:{time.time() + 0.05}"
    assert accept(book, "a", headers)
    assert book.unique.holder(KEY) == "a"
    if end == "cancelled":
        assert book.outcomes.cancel("a") is None
    elif end == "expired":
        deadline = time.time() + 0.1
        wait_for(lambda: time.time() > deadline, 5, what="its expiry")
        with_worker(book)  # the pop skips it: finished as expired
        assert sent == [] and book.expired_jobs.by_queue == {"q": 1}
    else:
        with_worker(book)
        assert [job.msgid for job in sent] == ["a"]
        if end == "done":
            book.reports.done(b"jm", "a", JobStatus.SUCCEEDED, '{"value": 1}', 2.0)
        elif end == "reply":
            book.reports.reply(b"jm", "a")
        else:
            book.outcomes.worker_failed(b"jm", "went silent")  # poison_after=1: set aside
            assert book.poisoned.by_queue == {"q": 1}
    assert book.unique.holder(KEY) is None
    assert accept(book, "b")  # the key is free again


def test_a_retrying_job_keeps_its_key() -> None:
    book, _sent, _told = make_book()
    accept(book, "a", f"retry-count:2,unique-key:{KEY}")
    with_worker(book)
    book.reports.done(b"jm", "a", JobStatus.RETRY, '{"value": null}', 2.0)  # delayed for its retry
    assert book.delays.delayed == {"q": 1} and book.unique.holder(KEY) == "a"


def test_a_job_that_arrives_expired_takes_no_key() -> None:
    book, _sent, _told = make_book()
    assert accept(book, "late", f"unique-key:{KEY},expires:{time.time() - 1}")
    assert book.unique.holder(KEY) is None


def test_the_same_msgid_resent_is_a_duplicate_not_a_refusal() -> None:
    book, _sent, _told = make_book()
    assert accept(book, "a")
    assert not accept(book, "a")  # the book's own dedup
    assert book.duplicates == 1 and book.unique.refused == {}


def test_a_batch_of_unique_jobs_is_never_stored_as_one_parcel() -> None:
    book, _sent, _told = make_book()
    headers = parse_headers(f"unique-key:{KEY}")
    assert not book.accept_parcel(b"c", b"", 2, "q", headers, b"", 1.0)


def test_the_journal_rebuilds_the_keys_of_held_jobs_on_open(
    reopen: Callable[[], JournalLike],
) -> None:
    book, sent, _told = make_book(reopen())
    accept(book, "queued")
    accept(book, "running", f"unique-key:{OTHER},unique-for:600")
    accept(book, "plain", "")
    with_worker(book)  # "queued" is handed out: it waits again after the restart
    assert [job.msgid for job in sent] == ["queued"]
    book.journal.commit()
    again, _sent, _told = make_book(reopen())
    again.recover()
    assert again.unique.holder(KEY) == "queued"
    assert again.unique.holder(OTHER) == "running"
    assert len(again.unique) == 2
    again.journal.close()  # before the group's schema is dropped


def test_a_job_handed_out_before_the_first_check_keeps_its_key(tmp_path: Path) -> None:
    path = str(tmp_path / "journal.db")
    book, _sent, _told = make_book(Journal(path))
    accept(book, "a", f"unique-key:{KEY},unique-for:600")
    book.journal.commit()
    book.journal.close()
    again, sent, _told = make_book(Journal(path))
    again.recover()
    with_worker(again)  # handed out at once, before any unique job came
    assert [job.msgid for job in sent] == ["a"]
    reason = again.unique.refusal("b", "q", unique())
    assert reason is not None and holder_of(reason) == "a"
    again.reports.done(b"jm", "a", JobStatus.SUCCEEDED, '{"value": 1}', 2.0)
    assert again.unique.holder(KEY) == "a"  # unique_for: taken 600 s from acceptance
    again.journal.close()


def test_a_job_delayed_over_a_restart_keeps_its_key_when_due(tmp_path: Path) -> None:
    path = str(tmp_path / "journal.db")
    book, _sent, _told = make_book(Journal(path))
    due = time.time() + 0.2
    accept(book, "later", f"delay-until:{due},unique-key:{KEY}")
    assert book.delays.delayed == {"q": 1} and book.unique.holder(KEY) == "later"
    book.journal.commit()
    book.journal.close()
    again, _sent, _told = make_book(Journal(path))
    again.recover()
    assert again.unique.holder(KEY) == "later"  # read back at start (test_unique_readback)
    again.promote_due(due + 1, 1.0)
    assert again.unique.holder(KEY) == "later"
    again.journal.close()


def test_a_job_due_again_does_not_take_a_key_another_job_holds() -> None:
    table = UniqueKeys(Clock(1000.0))
    table.hold("now", unique(), 1000.0)
    raw = f"unique-key:{KEY}".encode()
    assert table.rebuild([("delayed", raw, 900.0)]) == 0
    assert table.holder(KEY) == "now"
    assert table.rebuild([("now", raw, 1000.0)]) == 1  # its own: taken again


def test_a_batch_while_jobs_wait_on_disk_takes_each_key() -> None:
    book, _sent, _told = make_book(queue_window=1)
    for n in range(3):
        accept(book, f"w{n}", "")
    assert book._some_only_on_disk()
    headers = f"unique-key:{KEY}"
    book.accept_many(
        b"c",
        [(frames("m1", headers), "m1", "q", parse_headers(headers))],
        1.0,
    )
    assert book.unique.holder(KEY) == "m1"


# -- a live router: REJECT on the wire, MONITOR ------------------------------------------


def test_a_live_router_rejects_a_second_unique_job_and_counts_it(
    start_router: Callable[..., Harness],
) -> None:
    h = start_router()
    one, two = h.peer("frontend", "c1"), h.peer("frontend", "c2")
    first = h.request(one, "q", headers=f"unique-key:{KEY},unique-for:600")
    second = two.send("REQUEST", "q", f"unique-key:{KEY}", JOB)
    reject = two.expect("REJECT")
    assert reject[2] == second and holder_of(reject[3]) == first
    # The first client's resend of the same msgid: ACKed again, not refused.
    one.send("REQUEST", "q", f"unique-key:{KEY},unique-for:600", JOB, msgid=first)
    assert one.expect("ACK")[2] == first
    h.request(two, "q", headers=f"unique-key:{OTHER}")  # another key: taken
    m = h.ask("MONITOR")
    assert m["unique_refused"] == 1 and m["unique_keys"] == 2
    assert m["per_queue"]["q"]["unique_refused"] == 1
    assert m["duplicates"] == 1


def test_a_live_router_checks_unique_jobs_in_a_batch(
    start_router: Callable[..., Harness],
) -> None:
    h = start_router()
    client = h.peer("frontend", "c1")
    taken = h.request(client, "q", headers=f"unique-key:{OTHER}")
    jobs = [
        (msgid.encode(), b"q", f"unique-key:{key}".encode(), JOB.encode())
        for msgid, key in (("b1", KEY), ("b2", KEY), ("b3", OTHER), ("b4", OTHER))
    ]
    batch = client.send_raw([b"", b"eMQP/1.0", b"BATCH", b"batch-1", pack_jobs(jobs)])
    assert batch is None
    rejects: dict[str, str] = {}
    while True:
        frames = client.recv_raw()
        if frames[2] == b"REJECT":
            rejects[frames[4].decode()] = frames[5].decode()
        elif frames[2] == b"ACK" and frames[4] == b"batch-1":
            break
    assert sorted(rejects) == ["b2", "b3", "b4"]
    assert holder_of(rejects["b2"]) == "b1"  # an earlier job of the same batch
    assert "same BATCH" in rejects["b2"]
    assert holder_of(rejects["b3"]) == taken  # a job the router held already
    m = h.ask("MONITOR")
    assert m["unique_refused"] == 3 and m["queued"] == 2 and m["unique_keys"] == 2


def test_a_reject_frame_names_the_holder() -> None:
    reason = "not unique: job abc already holds its unique key (x); y"
    assert holder_of(Reject(msgid="m", job_msgid="j", reason=reason).reason) == "abc"
