"""Rate limits in the router: the sliding log, the limits of one router, and the book.

The limiter's clock is set by each test (no waiting); the book's journal is in
memory. The live router and real job managers are in
tests/system/e2e/test_rate_limits_e2e.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_eventmq.protocol import parse_headers
from django_eventmq.protocol.headers import Rate, parse_rate
from django_eventmq.router.admin_socket import monitor, status
from django_eventmq.router.book import Book
from django_eventmq.router.journal.store import DELAYED, MEMORY, WAITING, Journal
from django_eventmq.router.rate_limits import RateLimits, SlidingLog
from django_eventmq.router.routing import RoutedJob
from django_eventmq.router.waiting import WaitQueue
from tests.router.test_router import Harness, Peer, make_settings
from tests.support import wait_for

BODY = b'["run",{"callable":"f","path":"m","args":[],"kwargs":{}}]'


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def frames(msgid: str, queue: str, headers: str) -> list[bytes]:
    return [b"", b"eMQP/1.0", b"REQUEST", msgid.encode(), queue.encode(), headers.encode(), BODY]


def job(msgid: str, headers: str = "", queue: str = "q", seq: int = 0) -> RoutedJob:
    return RoutedJob(msgid, queue, frames(msgid, queue, headers), False, 0.0, seq=seq)


# -- the sliding log ---------------------------------------------------------------------


def test_a_sliding_log_allows_n_per_period_and_says_when_the_next_may_go() -> None:
    log = SlidingLog(parse_rate("3/10s"))
    for t in (0.0, 1.0, 2.0):
        assert log.free_at(t) == t
        log.take(t)
    assert log.free_at(5.0) == 10.0  # the first of the three leaves the window at 10
    assert log.used(9.99) == 3
    assert log.free_at(10.0) == 10.0 and log.used(10.0) == 2


@settings(max_examples=200, deadline=None)
@given(
    count=st.integers(1, 5),
    period=st.sampled_from([1.0, 2.5, 60.0]),
    gaps=st.lists(st.floats(0, 3, allow_nan=False), min_size=1, max_size=60),
)
def test_a_greedy_sender_never_exceeds_n_in_any_window_and_is_never_refused_below_it(
    count: int, period: float, gaps: list[float]
) -> None:
    log = SlidingLog(Rate(count, period, f"{count}/{period}s"))
    now, taken = 0.0, list[float]()
    for gap in gaps:
        now += gap
        before = [t for t in taken if t + period > now]
        if log.free_at(now) <= now:
            assert len(before) < count
            log.take(now)
            taken.append(now)
        else:
            assert len(before) == count  # refused only at the limit
    for i, start in enumerate(taken):
        assert sum(1 for t in taken[i:] if t < start + period) <= count


# -- the limits of one router, through a wait queue ------------------------------------------


def test_a_queue_at_its_limit_hands_nothing_out_and_says_when_to_wake() -> None:
    clock = Clock()
    limits = RateLimits({"q": parse_rate("2/s")}, clock)
    queue = WaitQueue("q", 0, None, {}, limits=limits)
    for i in range(4):
        queue.push(job(f"j{i}", seq=i + 1))
    assert [queue.pop().msgid, queue.pop().msgid] == ["j0", "j1"]  # type: ignore[union-attr]
    assert queue.pop() is None and queue.count == 2
    assert limits.wake_in() == 1.0 and limits.due_queues() == []
    clock.now += 1.0
    assert limits.due_queues() == ["q"] and limits.wake_in() is None
    assert queue.pop().msgid == "j2"  # type: ignore[union-attr]


def test_a_job_at_its_keys_limit_is_parked_and_the_rest_of_its_queue_goes_on() -> None:
    clock = Clock()
    limits = RateLimits({}, clock)
    queue = WaitQueue("q", 0, None, {}, limits=limits)
    limited = "rate-limit:1/s,rate-key:app.send"
    for i, headers in enumerate([limited, limited, "", limited, ""]):
        queue.push(job(f"j{i}", headers, seq=i + 1))
    popped = [queue.pop(), queue.pop(), queue.pop()]
    assert [j.msgid for j in popped if j is not None] == ["j0", "j2", "j4"]
    assert queue.pop() is None and queue.count == 0
    # Parked one period / N apart, so they come back at the rate they may go.
    assert [(j.msgid, at - clock.now) for j, at in limits.parked] == [("j1", 1.0), ("j3", 2.0)]
    assert limits.keys_status() == {"app.send": {"limit": "1/s", "used": 1}}
    assert limits.status({}) == {"q": {"limit": None, "used": 0, "held_back": 2, "throttled": 2}}


def test_jobs_of_one_key_share_its_limit_across_queues_and_other_keys_do_not() -> None:
    limits = RateLimits({}, Clock())
    a1, a2 = (
        job("a1", "rate-limit:1/m,rate-key:k", "x"),
        job("a2", "rate-limit:1/m,rate-key:k", "y"),
    )
    b = job("b", "rate-limit:1/m,rate-key:other", "x")
    assert limits.admit(a1) and not limits.admit(a2) and limits.admit(b)


def test_a_job_without_limits_costs_one_header_read_and_is_not_limited() -> None:
    limits = RateLimits({"other": parse_rate("1/s")}, Clock())
    plain = job("p")
    assert not limits.limited(plain) and plain.rate is None
    broken = RoutedJob("b", "q", [b"not a request"], False, 0.0)
    assert not limits.limited(broken)


# -- the book ------------------------------------------------------------------------------


def make_book(**overrides: object) -> tuple[Book, list[RoutedJob], Clock]:
    sent: list[RoutedJob] = []
    book = Book(
        make_settings(**overrides),
        Journal(MEMORY),
        deliver=lambda worker, job: sent.append(job),
        to_client=lambda identity, message: None,
    )
    clock = Clock(time.monotonic())
    book.rate_limits.clock = clock
    book.routing.add_worker(b"jm", ((10, "q"), (10, "r")), 0.0)
    for _ in range(20):
        book.reports.ready(b"jm", 0.0)
    return book, sent, clock


def accept(book: Book, msgid: str, headers: str = "", queue: str = "q") -> None:
    fr = frames(msgid, queue, headers)
    assert book.accept(b"client", fr, msgid, queue, parse_headers(headers), 1.0)


def test_the_book_holds_a_queue_at_its_limit_and_wakes_when_it_opens() -> None:
    book, sent, clock = make_book(rate_limits=(("q", "3/s"),))
    for i in range(5):
        accept(book, f"q{i}")
    accept(book, "r0", queue="r")  # another queue: not limited
    assert [j.msgid for j in sent] == ["q0", "q1", "q2", "r0"]
    assert book.journal.counts()[WAITING]["q"] == 2
    limits = status(book.routing, 0.0)["rate_limits_by_queue"]
    assert limits == {"q": {"limit": "3/s", "used": 3, "held_back": 2, "throttled": 0}}
    assert monitor(book)["per_queue"]["q"]["rate_limited"] == 2
    due = book.next_due()
    assert due is not None and 0.9 < due - time.time() <= 1.0  # folded into the poll timeout
    book.promote_due(time.time(), 2.0)
    assert len(sent) == 4  # not yet: the limiter's clock did not move
    clock.now += 1.0
    book.promote_due(time.time(), 2.0)
    assert [j.msgid for j in sent][4:] == ["q3", "q4"]
    assert book.next_due() is None


def test_the_book_parks_a_job_at_its_keys_limit_as_delayed_and_runs_it_when_due() -> None:
    book, sent, clock = make_book()
    limited = "rate-limit:2/s,rate-key:app.send"
    for i in range(4):
        accept(book, f"a{i}", limited)
    accept(book, "plain")
    assert [j.msgid for j in sent] == ["a0", "a1", "plain"]
    counts = book.journal.counts()
    assert counts[DELAYED]["q"] == 2 and book.delays.delayed["q"] == 2
    assert monitor(book)["per_queue"]["q"]["rate_limited"] == 2
    due = book.next_due()
    assert due is not None and 0.9 < due - time.time() <= 1.1
    clock.now += 1.0
    book.promote_due(time.time() + 1.01, 2.0)
    assert [j.msgid for j in sent][3:] == ["a2"]  # a3 was parked half a period later
    clock.now += 0.5
    book.promote_due(time.time() + 1.6, 3.0)
    assert [j.msgid for j in sent][3:] == ["a2", "a3"]
    assert book.delays.delayed["q"] == 0 and monitor(book)["rate_limited"] == 0


def test_a_cancelled_parked_job_is_no_longer_held_back_and_never_runs() -> None:
    book, sent, clock = make_book()
    limited = "rate-limit:1/h,rate-key:k"
    accept(book, "first", limited)
    accept(book, "second", limited)
    assert [j.msgid for j in sent] == ["first"]
    assert book.rate_limits.status({})["q"]["held_back"] == 1
    assert book.outcomes.cancel("second") is None
    assert book.rate_limits.status({}) == {}
    clock.now += 3600
    book.promote_due(time.time() + 3601, 2.0)
    assert [j.msgid for j in sent] == ["first"]


def test_a_job_waiting_for_a_free_worker_is_counted_when_it_goes_out() -> None:
    sent: list[RoutedJob] = []
    book = Book(
        make_settings(),
        Journal(MEMORY),
        deliver=lambda worker, job: sent.append(job),
        to_client=lambda identity, message: None,
    )
    book.rate_limits.clock = Clock()
    for i in range(3):
        accept(book, f"a{i}", "rate-limit:2/m,rate-key:k")
    assert sent == [] and book.journal.counts()[WAITING]["q"] == 3  # no job manager yet
    book.routing.add_worker(b"jm", ((10, "q"),), 0.0)
    for _ in range(3):
        book.reports.ready(b"jm", 0.0)
    book.promote_due(time.time(), 0.0)  # the turn's end: parked jobs are stored
    assert [j.msgid for j in sent] == ["a0", "a1"]
    assert book.journal.counts()[DELAYED]["q"] == 1


@pytest.mark.parametrize("rate", ["100/m", "10/5s", "5", 5, "1/d", "100000/h"])
def test_rates_parse(rate: object) -> None:
    parsed = parse_rate(rate)
    assert parsed.count >= 1 and parsed.period > 0


# -- a live router ---------------------------------------------------------------------------


def join(worker: Peer, queue: str, slots: int) -> None:
    inform = worker.send("INFORM", queue, "worker")
    assert worker.expect("ACK")[2] == inform
    worker.expect("FEATURES")
    for _ in range(slots):
        worker.send("READY")


@pytest.mark.parametrize(
    ("settings", "headers"),
    [({"rate_limits": (("q", "2/s"),)}, ""), ({}, "rate-limit:2/s,rate-key:k")],
    ids=["queue", "key"],
)
def test_a_live_router_hands_out_the_held_back_job_when_the_limit_lets_it(
    start_router: Callable[..., Harness], settings: dict[str, Any], headers: str
) -> None:
    """Two jobs go out at once, the third is held back (STATUS says so) and goes out
    once the limit lets it, with no message from anyone and its housekeeping tick (a
    quarter of a 40 s heartbeat) far off. (Book.next_due's tests show the wake-up
    time that shortens the poll timeout.)"""
    h = start_router(heartbeat_interval=40.0, heartbeat_timeout=120.0, **settings)
    worker = h.peer("backend", "w1")
    join(worker, "q", 5)
    client = h.peer("frontend", "c1")
    wait_for(lambda: h.ask("ROUTER_SHOW_WORKERS")["connected_workers"], 5, what="the worker")
    sent = [h.request(client, "q", headers=headers) for _ in range(3)]
    got = [worker.expect("REQUEST")[1] for _ in range(2)]
    status = h.ask("STATUS")["rate_limits_by_queue"]["q"]
    assert status["held_back"] == 1
    got.append(worker.expect("REQUEST", timeout=5.0)[1])
    assert sorted(got) == sorted(sent)
    assert not worker.pending()


def test_one_pop_parks_a_bounded_batch_and_the_queue_goes_on_at_the_next_turn() -> None:
    book, sent, _clock = make_book()
    book.rate_limits.park_batch = 3
    book.routing.remove_worker(b"jm")  # no job manager while they arrive: all wait
    for i in range(8):
        accept(book, f"a{i}", "rate-limit:1/h,rate-key:k")
    accept(book, "plain")
    book.routing.add_worker(b"jm", ((10, "q"),), 0.0)
    book.reports.ready(b"jm", 0.0)
    book.reports.ready(b"jm", 0.0)  # a0 goes out; a1..a3 parked, then the pop stops
    assert [j.msgid for j in sent] == ["a0"]
    assert book.rate_limits.wake_in() == 0.0  # the next turn goes on at once
    book.promote_due(time.time(), 0.0)  # a turn: a4..a6 parked
    assert [j.msgid for j in sent] == ["a0"] and book.delays.delayed["q"] == 6
    book.promote_due(time.time(), 0.0)  # the next: a7 parked, "plain" goes out
    assert [j.msgid for j in sent] == ["a0", "plain"]
    book.promote_due(time.time(), 0.0)
    assert book.delays.delayed["q"] == 7 and book.rate_limits.wake_in() is None


def test_idle_keys_are_dropped_once_many_were_seen() -> None:
    clock = Clock()
    limits = RateLimits({}, clock)
    for i in range(1000):
        assert limits.admit(job(f"j{i}", f"rate-limit:1/s,rate-key:old{i}"))
    clock.now += 0.5
    assert limits.admit(job("busy", "rate-limit:1/s,rate-key:busy"))  # none idle yet
    assert len(limits.keys) == 1001
    clock.now += 1.0
    for i in range(999):  # the 2000th key drops the idle ones
        assert limits.admit(job(f"n{i}", f"rate-limit:1/s,rate-key:new{i}"))
    assert len(limits.keys) == 2000
    assert limits.admit(job("last", "rate-limit:1/s,rate-key:last"))
    assert set(limits.keys) == {"last", *(f"new{i}" for i in range(999))}
    assert not limits.admit(job("again", "rate-limit:1/s,rate-key:new0"))  # still counted
