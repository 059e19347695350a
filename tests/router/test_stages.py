"""router/stages.py: a feature plugged into the book sees each job at the named
points of its path (accepted, handed out, finished, set aside, retrying,
settling), and only the points it has a method for; expiry and rate limits
settle what a pop took aside at the ``settling`` point."""

from __future__ import annotations

import time

from django_eventmq.protocol.headers import Headers
from django_eventmq.protocol.status import JobStatus
from django_eventmq.router.book import Book
from django_eventmq.router.expiry import EXPIRED_PAYLOAD
from django_eventmq.router.journal.store import DELAYED
from django_eventmq.router.router import Router
from django_eventmq.router.stages import Stages
from django_eventmq.router.waiting import RoutedJob
from tests.router.test_outbox import WORKER, hand_out_one
from tests.router.test_outbox import router as router  # the fixture
from tests.router.test_unique import accept, make_book, with_worker


class Recorder:
    """A feature that notes every point a job passes."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def on_accepted(self, job: RoutedJob, headers: Headers, wall: float) -> None:
        self.seen.append(("accepted", job.msgid))

    def on_finished(self, job: RoutedJob) -> None:
        self.seen.append(("finished", job.msgid))

    def on_set_aside(self, job: RoutedJob) -> None:
        self.seen.append(("set_aside", job.msgid))

    def on_retrying(self, job: RoutedJob) -> None:
        self.seen.append(("retrying", job.msgid))


def test_a_feature_is_plugged_into_the_points_it_has_methods_for() -> None:
    stages = Stages()

    class OnlyFinished:
        def on_finished(self, job: RoutedJob) -> None: ...

    stages.plug(OnlyFinished())
    assert (len(stages.finished), len(stages.accepted), len(stages.set_aside)) == (1, 0, 0)


def test_the_book_calls_the_points_a_job_passes() -> None:
    book, _sent, _told = make_book()
    recorder = Recorder()
    book.stages.plug(recorder)
    with_worker(book)
    assert accept(book, "done-job", "")
    book.reports.done(b"jm", "done-job", JobStatus.SUCCEEDED, '{"value": 1}', 2.0)
    assert accept(book, "retried", "retry-count:1")
    book.reports.ready(b"jm", 3.0)
    book.reports.done(b"jm", "retried", JobStatus.RETRY, "{}", 4.0)
    assert accept(book, "poisoned", "")
    book.reports.ready(b"jm", 5.0)
    book.outcomes.worker_failed(b"jm", "silent")  # poison_after=1: set aside

    assert recorder.seen == [
        ("accepted", "done-job"),
        ("finished", "done-job"),
        ("accepted", "retried"),
        ("retrying", "retried"),
        ("accepted", "poisoned"),
        ("set_aside", "poisoned"),
    ]


def test_a_job_sent_to_its_job_manager_passes_handed_out(router: Router) -> None:
    """``handed_out`` is called by the router's hand-outs once the job went out
    (after the journal commit that holds it), with the job manager's identity."""
    seen: list[tuple[str, bytes]] = []

    class Sends:
        def on_handed_out(self, job: RoutedJob, jobmanager: bytes) -> None:
            seen.append((job.msgid, jobmanager))

    router.book.stages.plug(Sends())
    hand_out_one(router, "m-1")
    assert seen == []  # handed to WORKER, not sent before the commit
    router.commits.sync(force=True)
    assert seen == [("m-1", WORKER)]


class Settles:
    """A feature that counts the ``settling`` point and notes what a pop took aside."""

    def __init__(self, book: Book) -> None:
        self.book = book
        self.calls = 0
        self.aside_then: list[str] = []

    def on_settling(self) -> None:
        self.calls += 1
        self.aside_then = [job.msgid for job in self.book.routing.waiting.aside]


def test_plain_jobs_never_reach_the_settling_point() -> None:
    book, sent, _told = make_book()
    settles = Settles(book)
    book.stages.plug(settles)
    with_worker(book)
    for i in range(3):
        assert accept(book, f"plain-{i}", "")
        book.reports.done(b"jm", f"plain-{i}", JobStatus.SUCCEEDED, "{}", 2.0)
    assert [job.msgid for job in sent] == ["plain-0", "plain-1", "plain-2"]
    assert settles.calls == 0


def test_a_job_found_expired_by_a_pop_is_finished_at_the_settling_point() -> None:
    """Expiry is plugged into ``settling``: the job a pop skipped is finished as
    expired (counted, its key freed) before features plugged after it run."""
    book, sent, _told = make_book()
    settles = Settles(book)
    book.stages.plug(settles)
    recorder = Recorder()
    book.stages.plug(recorder)
    assert book.expired_jobs.settle in book.stages.settling
    assert accept(book, "late", f"expires:{time.time() + 100}")
    book.routing.waiting.expiry.clock = lambda: time.time() + 200  # its time passed
    with_worker(book)  # the READY's pop skips it
    assert sent == []
    assert settles.calls == 1 and settles.aside_then == []  # cleared before the hooks
    assert book.expired_jobs.by_queue["q"] == 1
    assert recorder.seen == [("accepted", "late"), ("finished", "late")]


def test_a_job_parked_by_its_rate_limit_is_delayed_at_the_settling_point() -> None:
    """Rate limits are plugged into ``settling``: a job its key's limit parked at
    hand-out waits as delayed."""
    book, sent, _told = make_book()
    settles = Settles(book)
    book.stages.plug(settles)
    assert book.rate_limits.on_settling in book.stages.settling
    with_worker(book)
    book.reports.ready(b"jm", 1.0)  # two free slots
    limited = "rate-limit:1/h,rate-key:stages.test"
    assert accept(book, "first", limited)
    assert settles.calls == 0  # handed out: nothing parked
    assert accept(book, "second", limited)
    assert [job.msgid for job in sent] == ["first"]
    assert settles.calls == 1
    assert book.rate_limits.parked == [] and book.delays.delayed["q"] == 1
    assert book.journal.counts()[DELAYED]["q"] == 1


def test_poisoned_jobs_and_retries_are_plugged_into_their_points() -> None:
    book, _sent, _told = make_book()
    assert book.stages.lost == (book.poisoned.set_aside,)
    assert book.stages.retry_asked == (book.retries.take,)


def test_a_hook_plugged_before_them_may_take_a_lost_or_retried_job() -> None:
    """The first hook of ``lost`` / ``retry_asked`` that returns True takes the
    job; the book does nothing more with it (poisoned.py, retries.py not asked)."""
    book, _sent, _told = make_book()  # poison_after=1
    taken: list[tuple[str, str]] = []

    class Takes:
        def on_lost(self, job: RoutedJob, why: str, reporter: bytes | None) -> bool:
            taken.append(("lost", job.msgid))
            return True

        def on_retry_asked(self, job: RoutedJob, payload: str) -> bool:
            taken.append(("retry", job.msgid))
            return True

    book.stages.lost = (Takes().on_lost, *book.stages.lost)
    book.stages.retry_asked = (Takes().on_retry_asked, *book.stages.retry_asked)
    with_worker(book)
    assert accept(book, "dies", "")
    book.outcomes.worker_failed(b"jm", "silent")
    assert accept(book, "retried", "retry-count:1")
    book.routing.add_worker(b"jm2", ((10, "q"),), 0.0)
    book.reports.ready(b"jm2", 3.0)
    book.reports.done(b"jm2", "retried", JobStatus.RETRY, "{}", 4.0)
    assert taken == [("lost", "dies"), ("retry", "retried")]
    assert sum(book.poisoned.by_queue.values()) == 0  # not set aside
    assert book.stats.retried["q"] == 0  # not retried by retries.py


def test_a_lost_job_no_hook_takes_waits_again() -> None:
    book, _sent, _told = make_book()  # poison_after=1, but nothing plugged at lost
    book.stages.lost = ()
    with_worker(book)
    assert accept(book, "dies", "")
    book.outcomes.worker_failed(b"jm", "silent")
    assert sum(book.poisoned.by_queue.values()) == 0
    assert book.routing.waiting.queue("q").count == 1


def test_expiry_takes_a_cancelled_report_only_when_the_job_expired() -> None:
    """``cancel_reported``: expiry.py takes a DONE ``cancelled`` that says the job
    was held past its expiry (counted as expired); another cancel is finished as
    cancelled, not counted."""
    book, _sent, _told = make_book()
    assert book.stages.cancel_reported == (book.expired_jobs.on_cancel_reported,)
    with_worker(book)
    book.reports.ready(b"jm", 1.0)  # two free slots
    assert accept(book, "held-too-long", "") and accept(book, "cancelled", "")
    book.reports.done(b"jm", "held-too-long", JobStatus.CANCELLED, EXPIRED_PAYLOAD, 2.0)
    book.reports.done(b"jm", "cancelled", JobStatus.CANCELLED, "{}", 2.0)
    assert book.expired_jobs.by_queue == {"q": 1}
    assert "held-too-long" in book.finished
    assert "cancelled" in book.finished
