"""Expiry in the router: a job past its ``expires`` time is never handed out.

Driven on the book directly (as the frontend and backend would), with the
wait queues' clock set by the test, and through a live router's MONITOR.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from django_eventmq.protocol import Message, Reply, parse_headers
from django_eventmq.protocol.status import JobStatus
from django_eventmq.router.admin_socket import monitor
from django_eventmq.router.book import Book
from django_eventmq.router.expiry import Expiry
from django_eventmq.router.journal.store import MEMORY, WAITING, Journal
from django_eventmq.router.outcomes import CANCELLED_PAYLOAD
from django_eventmq.router.routing import RoutedJob
from django_eventmq.router.waiting import WaitQueue
from tests.router.test_router import Harness, make_settings
from tests.support import wait_for

BODY = b'["run",{"callable":"f","path":"m","args":[],"kwargs":{}}]'


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def frames(msgid: str, headers: str) -> list[bytes]:
    return [b"", b"eMQP/1.0", b"REQUEST", msgid.encode(), b"q", headers.encode(), BODY]


def make_book() -> tuple[Book, list[RoutedJob], list[tuple[bytes, Message]], Clock]:
    sent: list[RoutedJob] = []
    told: list[tuple[bytes, Message]] = []
    book = Book(
        make_settings(),
        Journal(MEMORY),
        deliver=lambda worker, job: sent.append(job),
        to_client=lambda identity, message: told.append((identity, message)),
    )
    clock = Clock(time.time())
    book.routing.waiting.expiry.clock = clock
    return book, sent, told, clock


def accept(book: Book, msgid: str, headers: str) -> None:
    assert book.accept(b"client", frames(msgid, headers), msgid, "q", parse_headers(headers), 1.0)


def test_a_wait_queue_pop_skips_an_expired_job_into_the_expiry_list() -> None:
    clock = Clock(100.0)
    expiry = Expiry(clock)
    index: dict[str, RoutedJob] = {}
    queue = WaitQueue("q", 0, None, index, expiry)
    old = RoutedJob("old", "q", frames("old", "expires:50"), False, 0.0, seq=1)
    later = RoutedJob("later", "q", frames("later", "expires:150"), False, 0.0, seq=2)
    plain = RoutedJob("plain", "q", [b"not a request"], False, 0.0, seq=3)
    for job in (old, later, plain):
        queue.push(job)
    assert queue.pop() is later  # "old" expired at 50: skipped
    assert expiry.expired == [old]
    assert (queue.count, queue.live, "old" in index) == (1, 1, False)
    clock.now = 200.0
    assert queue.pop() is plain  # frames it cannot read: never expires
    assert queue.pop() is None


def test_the_book_never_hands_out_an_expired_job_and_finishes_it_as_expired() -> None:
    book, sent, told, clock = make_book()
    accept(book, "gone", f"reply-requested,expires:{clock.now + 10}")
    accept(book, "kept", f"expires:{clock.now + 100}")
    accept(book, "plain", "")
    assert book.journal.counts()[WAITING]["q"] == 3
    clock.now += 50  # "gone" expires while no job manager is there
    book.routing.add_worker(b"jm", ((10, "q"),), 0.0)
    book.reports.ready(b"jm", 2.0)
    assert [job.msgid for job in sent] == ["kept"]
    assert book.expired_jobs.by_queue == {"q": 1}
    assert book.stats.finished["q"][JobStatus.CANCELLED] == 1  # the DONE words
    assert "gone" in book.finished  # remembered: a resend does not run it
    assert book.journal.find("gone") is None  # deleted from the journal
    ((identity, reply),) = told
    assert identity == b"client" and isinstance(reply, Reply) and reply.reply_to == "gone"
    assert json.loads(reply.payload)["error"]["type"] == "Expired"
    book.reports.done(b"jm", "kept", "ok", '{"value": 1}', 3.0)
    assert [job.msgid for job in sent] == ["kept", "plain"]
    counts = monitor(book)
    assert counts["jobs_expired"] == 1 and counts["per_queue"]["q"]["jobs_expired"] == 1
    assert counts["expired"] == 0  # leases: a different counter


def test_a_job_that_arrives_expired_is_not_stored_nor_handed_out() -> None:
    book, sent, told, _clock = make_book()
    book.routing.add_worker(b"jm", ((10, "q"),), 0.0)
    book.reports.ready(b"jm", 1.0)
    accept(book, "late", f"reply-requested,expires:{time.time() - 1}")
    assert sent == [] and book.expired_jobs.by_queue == {"q": 1}
    assert book.journal.find("late") is None
    assert [m.reply_to for _, m in told if isinstance(m, Reply)] == ["late"]
    accept(book, "fine", f"expires:{time.time() + 600}")
    assert [job.msgid for job in sent] == ["fine"]


def test_a_job_expired_in_a_job_manager_is_counted_and_its_reply_forwarded() -> None:
    book, _sent, told, clock = make_book()
    book.routing.add_worker(b"jm", ((10, "q"),), 0.0)
    book.reports.ready(b"jm", 1.0)
    accept(book, "held", f"reply-requested,expires:{clock.now + 5}")
    payload = '{"value": null, "error": {"type": "Expired", "message": "m", "traceback": ""}}'
    book.reports.done(b"jm", "held", JobStatus.CANCELLED, payload, 2.0)
    assert book.expired_jobs.by_queue == {"q": 1} and book.journal.find("held") is None
    assert [m.payload for _, m in told if isinstance(m, Reply)] == [payload]
    # A plain cancel is not an expiry.
    accept(book, "other", "")
    book.reports.done(b"jm", "other", JobStatus.CANCELLED, CANCELLED_PAYLOAD, 3.0)
    assert book.expired_jobs.by_queue == {"q": 1}
    assert book.stats.finished["q"][JobStatus.CANCELLED] == 2


def test_monitor_counts_jobs_expired_per_queue_on_a_live_router(
    start_router: Callable[..., Harness],
) -> None:
    h = start_router()
    client = h.peer("frontend", "c1")
    h.request(client, "q", headers=f"expires:{time.time() + 0.5}")
    h.request(client, "q", headers=f"expires:{time.time() + 600}")

    def queued() -> Any:
        return h.ask("MONITOR")["per_queue"].get("q", {}).get("queued") == 2

    wait_for(queued, 10, what="both jobs waiting")
    passed = time.time() + 0.6
    wait_for(lambda: time.time() >= passed, 5, what="the first job's expiry")
    worker = h.peer("backend", "w1")
    inform = worker.send("INFORM", "q", "worker")
    assert worker.expect("ACK")[2] == inform
    worker.expect("FEATURES")
    worker.send("READY")
    worker.send("READY")
    worker.expect("REQUEST")
    wait_for(lambda: h.ask("MONITOR")["jobs_expired"] == 1, 10, what="jobs_expired 1")
    m = h.ask("MONITOR")
    assert m["per_queue"]["q"]["jobs_expired"] == 1 and m["queued"] == 0
    assert not worker.pending()
