"""Features as stages (jobmanager/stages.py): a stage registered with the lifecycle is
called at each point of a job's path; a job it does not want never calls it. Driven
directly, on a pool that only hands out (no child process)."""

from __future__ import annotations

from typing import Any

from django_eventmq.jobmanager.child_handles import Child
from django_eventmq.jobmanager.lifecycle import Lifecycle
from django_eventmq.jobmanager.managed_job import ManagedJob
from django_eventmq.jobmanager.outcomes import Recorder
from django_eventmq.jobmanager.retries import Retry
from django_eventmq.jobmanager.stages import NO_STAGES, Ending, Plan, Stage, Stages
from django_eventmq.protocol.headers import EMPTY_HEADERS, Headers
from django_eventmq.protocol.status import JobStatus
from django_eventmq.runtime.settings import Settings


class _Child:
    """What the lifecycle reads of a child it hands jobs to."""

    def __init__(self) -> None:
        self.pid = 7
        self.outgoing: list[bytes] = []
        self.partials: list[tuple[int, str]] = []


class _Pool:
    """Every job starts at once in the one child."""

    kinds_known = True
    async_names: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self.child = _Child()

    def pick(self, size: int, concurrent: bool) -> _Child:
        return self.child

    def assign(self, child: _Child, *args: object) -> bool:
        child.outgoing.append(b"J")
        return True

    def flush(self, child: _Child) -> None:
        child.outgoing.clear()


class _Probe(Stage):
    """A new feature: it notes each point it is called at, for jobs with a ``timeout``."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def wants(self, headers: Headers, record: bool) -> bool:
        return headers.timeout > 0

    def accepted(self, job: ManagedJob, headers: Headers) -> None:
        self.seen.append("accepted")

    def handing_out(self, job: ManagedJob, now: float) -> Ending | None:
        self.seen.append("handing_out")
        return None

    def started(self, job: ManagedJob, child: Child) -> None:
        self.seen.append("started")

    def progress(self, job: ManagedJob, payload: str) -> None:
        self.seen.append(f"progress {payload}")

    def failing(self, job: ManagedJob, payload: str) -> Retry | None:
        self.seen.append("failing")
        return None  # not its to retry

    def ended(
        self,
        job: ManagedJob,
        status: JobStatus,
        now: float,
        value: object,
        error: dict[str, str] | None,
    ) -> None:
        self.seen.append(f"ended {status} {value if error is None else error['type']}")

    def set_aside(self, job: ManagedJob, error: dict[str, str], now: float) -> None:
        self.seen.append("set_aside")

    def reporting(self, job: ManagedJob, /) -> None:
        self.seen.append("reporting")


def _lifecycle(probe: Stage) -> tuple[Lifecycle, list[str]]:
    reported: list[str] = []
    life = Lifecycle(
        Settings(),
        _Pool(),  # type: ignore[arg-type]
        Recorder("jm"),
        report=lambda job, status, payload: reported.append(f"{job.msgid} {status}"),
        nack=lambda job, reason: None,
        router_retries=lambda: True,
        stages=(probe,),  # the one registration line of a new feature
    )
    return life, reported


def _take(life: Lifecycle, msgid: str, headers: Headers) -> ManagedJob:
    job = ManagedJob(msgid, "q", '{"path": "a", "callable": "b"}', False)
    job.headers = headers
    life.accept(job)  # its plan: the stages that want it
    life.dispatch(1.0)
    return job


def test_a_registered_stage_is_called_at_each_point_of_a_job_it_wants() -> None:
    probe = _Probe()
    life, reported = _lifecycle(probe)
    job = _take(life, "m1", Headers(timeout=30))
    child: Any = job.child
    child.partials.append((1, '{"value": 50}'))
    life.partials.take(child, life.jobs, 1.0)
    life.finish([(1, "ok", '{"value": 3}')], 2.0)
    assert probe.seen == [
        "accepted",
        "handing_out",
        "started",
        'progress {"value": 50}',
        "ended succeeded 3",
        "reporting",
    ]
    assert reported == ["m1 ok"]

    # Lost with its worker, then set aside by the router: the last two points.
    probe.seen.clear()
    _take(life, "m2", Headers(timeout=30))
    life.endings.lost(life.jobs.pop(2), 7, -9, 3.0)
    life.set_aside("m2", "died too often", 4.0)
    assert probe.seen == [
        "accepted",
        "handing_out",
        "started",
        "ended retrying WorkerDied",
        "reporting",
        "set_aside",
    ]

    # Failed, no retries left: the retry decision (a stage too) and this one say no.
    probe.seen.clear()
    _take(life, "m3", Headers(timeout=30))
    failure = '{"job": "b", "type": "E", "message": "m", "traceback": ""}'
    life.finish([(3, "failed", failure)], 5.0)
    assert probe.seen == [
        "accepted",
        "handing_out",
        "started",
        "failing",
        "ended failed E",
        "reporting",
    ]
    assert reported[-1] == "m3 failed"


def test_a_job_a_stage_does_not_want_never_calls_it() -> None:
    probe = _Probe()
    life, reported = _lifecycle(probe)
    job = _take(life, "m1", EMPTY_HEADERS)
    life.finish([(1, "ok", '{"value": 3}')], 2.0)
    assert probe.seen == [] and reported == ["m1 ok"]
    # Its plan: only what acts on every job (the retry decision, should it fail).
    assert job.plan.started == job.plan.ended == job.plan.reporting == ()
    assert len(job.plan.failing) == 1


def test_plans_are_made_once_per_headers_and_a_plan_of_nothing_is_shared() -> None:
    stages = Stages((_Probe(),))
    headers = Headers(timeout=5)
    assert stages.plan(headers, False) is stages.plan(headers, False)
    assert stages.plan(EMPTY_HEADERS, True) is NO_STAGES  # the probe wants none of these
    assert isinstance(stages.plan(headers, True), Plan)
    assert Stages().plan(headers, True) is NO_STAGES
