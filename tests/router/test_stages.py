"""router/stages.py: a feature plugged into the book sees each job at the named
points of its path (accepted, handed out, finished, set aside, retrying), and
only the points it has a method for."""

from __future__ import annotations

from django_eventmq.protocol.headers import Headers
from django_eventmq.protocol.status import JobStatus
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
