"""The outcomes of a run, in one place (jobmanager/endings.py), and the job manager's
one retry decision (jobmanager/retries.py): driven directly, no child process."""

from __future__ import annotations

import json
from typing import Any

from django_eventmq.jobmanager import retries
from django_eventmq.jobmanager.endings import Endings
from django_eventmq.jobmanager.managed_job import SKIP_MOVE, SKIP_NACK, ManagedJob
from django_eventmq.jobmanager.outcomes import Recorder
from django_eventmq.jobmanager.partials import Partials
from django_eventmq.jobmanager.result_records import ResultRecords
from django_eventmq.jobmanager.stages import Stages
from django_eventmq.protocol.status import JobStatus
from django_eventmq.runtime.settings import Settings
from django_eventmq.runtime.stats import Stats


def _failure(retry: dict[str, Any] | None = None) -> str:
    info: dict[str, Any] = {"job": "x.y", "type": "E", "message": "m", "traceback": ""}
    if retry is not None:
        info["retry"] = retry
    return json.dumps(info)


def _job(attempt: int = 1, retry_count: int = 0) -> ManagedJob:
    return ManagedJob("m1", "default", "{}", True, retry_count=retry_count, attempt=attempt)


class _Run:
    """Endings of one job manager, with what it reported and handed back."""

    def __init__(self, *, router_retries: bool) -> None:
        self.reported: list[tuple[str, str]] = []
        self.nacked: list[str] = []
        self.jobs: dict[int, ManagedJob] = {}
        self.held = retries.LocalRetries()
        recorder = Recorder("jm")
        self.recorder = recorder
        #: The stages of the job manager that act at the endings.
        self.stages = Stages(
            (
                retries.RetryDecision(Settings(), lambda job: router_retries, lambda: 0.5),
                ResultRecords(recorder),
                Partials(lambda job, payload: None),
            )
        )
        self.endings = Endings(
            self.jobs,
            Stats(),
            self.held,
            report=lambda job, status, payload: self.reported.append((status, payload)),
            nack=lambda job, why: self.nacked.append(why),
            router_retries=lambda job: router_retries,
        )

    def finish(self, seq: int, job: ManagedJob, status: str, payload: str) -> list[int]:
        self.stages.fit(job)
        self.jobs[seq] = job
        return self.endings.finish([(seq, status, payload)], 10.0)


def test_each_child_status_settles_as_its_outcome() -> None:
    run = _Run(router_retries=True)
    assert run.finish(1, _job(), "ok", '{"value": 3}') == []
    assert run.finish(2, _job(), "failed", _failure()) == []
    assert run.finish(3, _job(), "refused", _failure()) == []
    assert [status for status, _ in run.reported] == ["ok", "failed", "refused"]
    assert run.jobs == {}


def test_a_job_moved_to_a_new_child_is_not_over_and_a_nacked_one_goes_back() -> None:
    run = _Run(router_retries=True)
    moved, nacked = _job(), _job()
    moved.skip, nacked.skip = SKIP_MOVE, SKIP_NACK
    assert run.finish(1, moved, "cancelled", "") == [1]
    assert run.jobs == {1: moved}
    assert run.finish(2, nacked, "cancelled", "") == []
    assert (run.reported, run.nacked) == ([], ["stopping"])


def test_our_router_retries_a_failed_job_with_the_delay_of_its_own_policy_only() -> None:
    run = _Run(router_retries=True)
    run.finish(1, _job(retry_count=2), "failed", _failure())
    run.finish(2, _job(retry_count=2), "failed", _failure({"in": 7}))
    (first, plain), (second, own) = run.reported
    assert (first, second) == (JobStatus.RETRY, JobStatus.RETRY)
    assert "retry_in" not in json.loads(plain)  # the router's own back-off applies
    assert json.loads(own)["retry_in"] == 7.0
    assert run.held.next_due() is None


def test_without_our_router_a_failed_job_waits_here_for_its_next_attempt() -> None:
    run = _Run(router_retries=False)
    job = _job(retry_count=1)
    run.finish(1, job, "failed", _failure({"in": 5}))
    assert (run.reported, job.attempt, run.jobs) == ([], 2, {1: job})
    assert run.held.next_due() == 15.0
    assert (run.held.take_due(14.9), run.held.take_due(15.0)) == ([], [1])


def test_the_retry_decision_gives_up_when_attempts_run_out_or_the_policy_says_no() -> None:
    settings = Settings()

    def decide(job: ManagedJob, payload: str, by_router: bool) -> retries.Retry | None:
        return retries.decide(job, payload, settings, lambda: 0.5, lambda job: by_router)

    assert decide(_job(attempt=2, retry_count=1), _failure(), True) is None
    assert decide(_job(retry_count=3), _failure({"allowed": False}), True) is None
    assert decide(_job(retry_count=1), _failure(), True) == retries.Retry(True, None)
    local = decide(_job(retry_count=1), _failure(), False)
    assert local is not None and not local.by_router and local.delay is not None


def test_a_recorded_job_gets_its_records_and_an_unrecorded_one_none() -> None:
    run = _Run(router_retries=True)
    recorded = _job()
    recorded.record = True
    run.finish(1, _job(), "ok", '{"value": 1}')
    run.finish(2, recorded, "ok", '{"value": 2}')
    statuses = [record["status"] for record in run.recorder.records]
    assert statuses == [JobStatus.SUCCEEDED]
