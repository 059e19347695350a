"""Partials inside a worker child, in-process: progress(), generator jobs, the pipe frames."""

from __future__ import annotations

import json
from typing import Any

import pytest

from django_eventmq import progress
from django_eventmq.client.handles import EagerHandle
from django_eventmq.errors import SerializationError
from django_eventmq.jobmanager import pipe
from django_eventmq.jobmanager.job_runner import JobRunner
from django_eventmq.jobmanager.progress import encode_partial
from django_eventmq.protocol.extensions import MAX_PARTIAL_BYTES
from django_eventmq.protocol.status import JobStatus
from django_eventmq.runtime.registry import import_job_modules
from tests.fake_router import body
from tests.jobmanager.test_child import PipeEnd
from tests.system.streaming import jobs

JOBS = "tests.system.streaming.jobs"
import_job_modules([JOBS])


def run(callable_name: str, *args: Any) -> tuple[str, Any, list[Any]]:
    reported: list[str] = []
    status, payload = JobRunner().run(body(callable_name, *args, path=JOBS), reported.append)
    return status, json.loads(payload), [json.loads(p)["value"] for p in reported]


def test_progress_reports_go_to_the_reporter_in_order():
    status, reply, parts = run("long_job", 3, 0.0)
    assert (status, reply) == (JobStatus.OK, {"value": "finished"})
    assert parts == [{"step": 1, "of": 3}, {"step": 2, "of": 3}, {"step": 3, "of": 3}]


def test_a_generator_job_yields_partials_and_returns_the_final_value():
    status, reply, parts = run("count_up", "g", 3)
    assert status == JobStatus.OK
    assert reply == {"value": {"label": "g", "total": 3}}
    assert parts == [{"label": "g", "i": i} for i in range(3)]


def test_a_value_that_is_not_json_fails_the_job_with_a_clear_error():
    status, reply, parts = run("bad_progress")
    assert status == JobStatus.FAILED and parts == []
    assert reply["type"] == "SerializationError"
    assert "progress value is not JSON-serialisable" in reply["message"]


def test_a_too_big_progress_value_is_refused_in_the_job():
    with pytest.raises(SerializationError, match="more than"):
        encode_partial("x" * MAX_PARTIAL_BYTES)


def test_progress_outside_a_job_manager_checks_and_does_nothing():
    progress({"fine": 1})  # no reporter: nothing to send, no error
    with pytest.raises(SerializationError):
        progress({1, 2})
    assert jobs.long_job(2, 0.0) == "finished"  # the function still runs directly


def test_after_a_job_progress_no_longer_reaches_its_reporter():
    reported: list[str] = []
    JobRunner().run(body("long_job", 1, 0.0, path=JOBS), reported.append)
    progress("late")  # e.g. a thread the job left behind
    assert len(reported) == 1


def test_serve_writes_partial_frames_before_the_result():
    end = PipeEnd(JobRunner())
    try:
        end.write(pipe.encode_job(7, body("count_up", "p", 2, path=JOBS)))
        frames = end.read_until(3)
    finally:
        end.close()
    assert [f[:1] for f in frames] == [pipe.PARTIAL, pipe.PARTIAL, pipe.RESULT]
    assert pipe.decode_partial_frame(frames[0]) == (7, '{"value":{"label":"p","i":0}}')
    assert pipe.decode_result(frames[2])[:2] == (7, JobStatus.OK)


def test_an_eager_generator_job_runs_to_its_end():
    handle = EagerHandle.ran("m1", jobs.count_up.func("e", 2))
    assert list(handle.stream()) == [{"label": "e", "i": 0}, {"label": "e", "i": 1}]
    assert handle.wait() == {"label": "e", "total": 2}


def test_eager_delay_of_a_generator_job_streams_its_yields(eventmq_settings):
    eventmq_settings(EAGER=True)
    handle = jobs.count_up.delay("d", 3)
    assert [part["i"] for part in handle.stream(timeout=1)] == [0, 1, 2]
    assert handle.wait() == {"label": "d", "total": 3}
