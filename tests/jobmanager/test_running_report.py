"""RunningReport: what a job manager tells its routers its worker processes run,
as a whole set, when it changed (at most every EVERY seconds) or is due a refresh."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django_eventmq.jobmanager.managed_job import ManagedJob
from django_eventmq.jobmanager.running import EVERY, REFRESH, RunningReport
from django_eventmq.protocol import Running, new_msgid


@dataclass
class FakeChild:
    pid: int
    head: int | None = None
    tasks: dict[int, float] = field(default_factory=dict)


@dataclass
class FakeSession:
    speaks: bool = True

    def running(self, jobs: dict[str, tuple[int, float]]) -> Running | None:
        return Running(msgid=new_msgid(), jobs=jobs) if self.speaks else None


@dataclass
class FakeLink:
    session: FakeSession = field(default_factory=FakeSession)
    sent: list[Any] = field(default_factory=list)

    def send(self, message: Any) -> None:
        self.sent.append(message)


def job(msgid: str, began: float, link: int = 0) -> ManagedJob:
    return ManagedJob(
        msgid=msgid, queue="q", body_text="", reply_requested=False, began=began, link=link
    )


def test_sent_when_the_set_changes_not_faster_than_every_and_refreshed_while_running() -> None:
    report, link = RunningReport(), FakeLink()
    child = FakeChild(pid=41)
    jobs = {1: job("a", began=10.0)}
    report.turn(10.0, [child], jobs, [link])
    assert link.sent == []  # nothing runs: nothing to say
    child.head = 1
    report.turn(11.0, [child], jobs, [link])
    assert [m.jobs for m in link.sent] == [{"a": (41, 1.0)}]
    report.turn(11.0 + REFRESH - 0.1, [child], jobs, [link])
    assert len(link.sent) == 1  # no change: nothing until the refresh
    report.turn(11.0 + REFRESH, [child], jobs, [link])
    assert len(link.sent) == 2
    # A new job: at once if EVERY has passed, else at the first turn after it.
    jobs[2] = job("b", began=20.0)
    child.head = 2
    report.turn(11.0 + REFRESH + EVERY / 2, [child], jobs, [link])
    assert len(link.sent) == 2
    report.turn(11.0 + REFRESH + EVERY, [child], jobs, [link])
    assert list(link.sent[-1].jobs) == ["b"]
    # Idle again: one empty set, then silence.
    child.head = None
    report.turn(30.0, [child], jobs, [link])
    report.turn(60.0, [child], jobs, [link])
    assert [m.jobs for m in link.sent[3:]] == [{}]


def test_each_router_hears_of_its_own_jobs_and_a_reference_router_of_none() -> None:
    report = RunningReport()
    ours, reference = FakeLink(), FakeLink(FakeSession(speaks=False))
    children = [FakeChild(pid=1, head=1), FakeChild(pid=2, head=2), FakeChild(pid=3, head=3)]
    jobs = {1: job("a", 5.0, link=0), 2: job("b", 5.0, link=1), 3: job("c", 0.0, link=0)}
    report.turn(6.0, children, jobs, [ours, reference])
    # "c" has not been seen starting (began 0): not running yet.
    assert [m.jobs for m in ours.sent] == [{"a": (1, 1.0)}]
    assert reference.sent == []
