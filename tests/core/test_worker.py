"""The worker child's job runner, in-process: what runs, what is refused, what a result says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from django_eventmq.core import worker
from django_eventmq.core.registry import import_job_modules
from django_eventmq.core.worker import FAILED, OK, REFUSED, Hooks, JobRunner, load_hooks
from tests.jobs_fixtures.fake_router import SAMPLE, body

import_job_modules([SAMPLE])


def run(body_text: str, allowed: tuple[str, ...] = ()) -> tuple[str, dict[str, object]]:
    status, payload = JobRunner(allowed).run(body_text)
    return status, json.loads(payload)


def test_registered_job_returns_value() -> None:
    assert run(body("add", 2, 3)) == (OK, {"value": 5})
    assert run(body("echo", 1, k="v")) == (OK, {"value": {"args": [1], "kwargs": {"k": "v"}}})


def test_raising_job_reports_type_message_and_traceback() -> None:
    status, info = run(body("fail", "bad input"))
    assert status == FAILED
    assert info["job"] == f"{SAMPLE}.fail"
    assert (info["type"], info["message"]) == ("ValueError", "bad input")
    assert "raise ValueError" in str(info["traceback"])


def test_unregistered_job_is_refused_and_not_run(tmp_path: Path) -> None:
    target = tmp_path / "ran.txt"
    status, info = run(body("not_a_job", str(target)))
    assert status == REFUSED
    assert info["type"] == "JobNotAllowed"
    assert info["job"] == f"{SAMPLE}.not_a_job"
    assert not target.exists()


def test_module_outside_registry_is_refused_even_if_importable() -> None:
    status, info = run(body("system", "true", path="os"))
    assert (status, info["type"]) == (REFUSED, "JobNotAllowed")


def test_invalid_body_is_refused() -> None:
    status, info = run("not json")
    assert (status, info["type"]) == (REFUSED, "InvalidJob")
    status, info = run('["run", {"path": "x"}]')
    assert (status, info["type"]) == (REFUSED, "InvalidJob")


def test_allowed_module_runs_class_method() -> None:
    text = json.dumps(
        ["run", {"path": f"{SAMPLE}:Adder", "callable": "add", "args": [5], "class_args": [10]}]
    )
    assert run(text, allowed=(SAMPLE,)) == (OK, {"value": 15})


def test_allowed_module_with_missing_callable_fails() -> None:
    status, info = run(body("nope", path=SAMPLE), allowed=(SAMPLE,))
    assert (status, info["type"]) == (FAILED, "JobNotFound")


def test_unserialisable_return_value_is_a_serialization_error() -> None:
    status, info = run(body("unserialisable"))
    assert (status, info["type"]) == (FAILED, "SerializationError")
    assert "unserialisable" in str(info["message"])


def test_hooks_run_around_each_job_even_when_it_fails() -> None:
    calls: list[str] = []
    hooks = Hooks(
        before_job=lambda: calls.append("before"), after_job=lambda: calls.append("after")
    )
    runner = JobRunner((), hooks)
    assert runner.run(body("add", 1, 1))[0] == OK
    assert runner.run(body("fail"))[0] == FAILED
    assert calls == ["before", "after", "before", "after"]


def test_refused_job_does_not_call_hooks() -> None:
    calls: list[str] = []
    runner = JobRunner((), Hooks(before_job=lambda: calls.append("before")))
    assert runner.run(body("not_a_job", "/nonexistent"))[0] == REFUSED
    assert calls == []


def test_load_hooks_uses_what_the_module_defines() -> None:
    hooks = load_hooks("tests.jobs_fixtures.hooks")
    assert hooks.setup.__name__ == "setup"
    assert load_hooks(None) == Hooks()
    with pytest.raises(ImportError):
        load_hooks("tests.jobs_fixtures.no_such_hooks")


def test_result_codec_round_trip() -> None:
    data = worker.encode_result(b"42", OK, '{"value":"a\\nb"}')
    assert worker.decode_result(data) == (42, OK, '{"value":"a\\nb"}')
    assert worker.encode_job(7, '["run",{}]') == b'7\n["run",{}]'
