"""Retry back-off: it doubles per failed attempt from RETRY_BACKOFF_BASE up to RETRY_BACKOFF_CAP.

The delay is computed with time passed in (the job manager's local retries)
or bounded by the clock readings around the call (the router's), never by
waiting.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from django_eventmq.jobmanager.lifecycle import Lifecycle
from django_eventmq.jobmanager.managed_job import ManagedJob
from django_eventmq.jobmanager.outcomes import Recorder
from django_eventmq.jobmanager.pool import Pool
from django_eventmq.protocol import Headers, JobBody, Message, Reply, Request, codec
from django_eventmq.protocol.status import JobStatus
from django_eventmq.router.book import Book
from django_eventmq.router.journal.store import MEMORY, Journal
from django_eventmq.runtime.retry import backoff
from django_eventmq.runtime.settings import Settings

BODY = JobBody(path="tests.django.results.jobs", callable="always_fails", args=("/nowhere",))
FAILURE = json.dumps(
    {"job": BODY.name, "type": "RuntimeError", "message": "always", "traceback": ""}
)


@pytest.fixture
def backoff_settings(eventmq_settings: Any) -> Settings:
    """Base 2 s, cap 30 s, from Django's ``EVENTMQ`` setting."""
    settings: Settings = eventmq_settings(RETRY_BACKOFF_BASE=2, RETRY_BACKOFF_CAP=30)
    assert (settings.retry_backoff_base, settings.retry_backoff_cap) == (2, 30)
    return settings


@pytest.mark.parametrize(
    ("base", "cap", "delays"),
    [
        (2.0, 30.0, [2, 4, 8, 16, 30, 30]),
        (0.5, 1000.0, [0.5, 1, 2, 4, 8, 16]),
        (1.0, 300.0, [1, 2, 4, 8, 16, 32]),  # the defaults
        (5.0, 5.0, [5, 5, 5, 5, 5, 5]),  # cap == base: constant
        (10.0, 4.0, [4, 4, 4, 4, 4, 4]),  # cap below base wins
    ],
)
def test_backoff_doubles_per_attempt_up_to_the_cap(
    base: float, cap: float, delays: list[float]
) -> None:
    assert [backoff(attempt, base, cap) for attempt in range(1, 7)] == delays


def test_backoff_defaults_come_from_the_settings() -> None:
    defaults = Settings()
    assert (defaults.retry_backoff_base, defaults.retry_backoff_cap) == (1.0, 300.0)


def test_job_manager_holds_a_failed_job_for_its_backoff(backoff_settings: Settings) -> None:
    """Local retries (a reference router): each failure waits twice as long, up to the cap."""
    reports: list[tuple[str, int]] = []
    life = Lifecycle(
        backoff_settings,
        Pool(backoff_settings),  # never started: no job here reaches a child
        Recorder("jm"),
        report=lambda job, status, payload: reports.append((status, job.attempt)),
        nack=lambda job, why: None,
        router_retries=lambda: False,
    )
    job = ManagedJob(
        msgid="m1", queue="default", body_text=BODY.encode(), reply_requested=True, retry_count=6
    )
    life.accept(job)
    now = 1_000.0
    delays = []
    for attempt in range(1, 7):
        seq = life.pending.popleft()  # what dispatch() would hand to a child
        assert job.attempt == attempt
        life.finish([(seq, JobStatus.FAILED, FAILURE)], now)
        due = life.next_retry()
        assert due is not None
        delays.append(due - now)
        life.due_retries(due - 0.001)
        assert not life.pending  # not a moment early
        life.due_retries(due)
        assert list(life.pending) == [seq]
        now = due + 0.25  # it ran again for a quarter of a second, and failed
    assert delays == [2, 4, 8, 16, 30, 30]
    assert reports == []  # nothing reported while retries were left
    life.finish([(life.pending.popleft(), JobStatus.FAILED, FAILURE)], now)
    assert reports == [(JobStatus.FAILED, 7)]
    assert life.next_retry() is None


def test_router_delays_a_retried_job_by_its_backoff(backoff_settings: Settings) -> None:
    """Retries by our router (DONE ``retry``): the journal holds the job until now + back-off."""
    sent: list[bytes] = []
    replies: list[Message] = []
    book = Book(
        backoff_settings,
        Journal(MEMORY),
        deliver=lambda w, j: sent.append(j.msgid.encode()) or True,
        to_client=lambda identity, message: replies.append(message),
    )
    book.routing.add_worker(b"jm", ((10, "default"),), 0.0)
    book.reports.ready(b"jm", 0.0)
    request = Request(
        msgid="r1",
        queue="default",
        headers=Headers(retry_count=6, reply_requested=True),
        body_text=BODY.encode(),
    )
    frames = codec.encode(request)
    assert book.accept(b"client", frames, request.msgid, request.queue, request.headers, 0.0)
    pauses = []
    for _ in range(6):
        assert sent.pop() == b"r1"  # handed to the job manager
        before = time.time()
        book.reports.done(b"jm", "r1", JobStatus.RETRY, FAILURE, 1.0)
        after = time.time()
        due = book.next_due()
        assert due is not None
        # due = (the clock when the retry was decided) + pause, with before <= clock <= after.
        low, high = due - after, due - before
        (pause,) = [p for p in (2, 4, 8, 16, 30) if low - 1e-6 <= p <= high + 1e-6]
        pauses.append(pause)
        book.promote_due(due, 2.0)  # the router's loop at that wall time
        assert book.next_due() is None
    assert pauses == [2, 4, 8, 16, 30, 30]
    assert sent.pop() == b"r1"  # the seventh run
    book.reports.done(b"jm", "r1", JobStatus.RETRY, FAILURE, 3.0)  # retries used up: finished
    assert book.next_due() is None and not sent
    assert [(type(m), m.reply_to) for m in replies] == [(Reply, "r1")]
