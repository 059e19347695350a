"""The worker child's job runner, in-process: what runs, what is refused, what a result says."""

from __future__ import annotations

import json
import select
import socket
import threading
from pathlib import Path

import pytest

from django_eventmq.jobmanager import pipe, worker_process
from django_eventmq.jobmanager.job_hooks import Hooks, load_hooks
from django_eventmq.jobmanager.job_runner import JobRunner
from django_eventmq.jobmanager.pipe import FrameReader, frame, write_all
from django_eventmq.protocol.status import JobStatus
from django_eventmq.runtime.registry import import_job_modules
from tests.fake_router import SAMPLE, body
from tests.support import wait_for

import_job_modules([SAMPLE])


def run(body_text: str, allowed: tuple[str, ...] = ()) -> tuple[str, dict[str, object]]:
    status, payload = JobRunner(allowed).run(body_text)
    return status, json.loads(payload)


def test_registered_job_returns_value() -> None:
    assert run(body("add", 2, 3)) == (JobStatus.OK, {"value": 5})
    assert run(body("echo", 1, k="v")) == (
        JobStatus.OK,
        {"value": {"args": [1], "kwargs": {"k": "v"}}},
    )


def test_raising_job_reports_type_message_and_traceback() -> None:
    status, info = run(body("fail", "bad input"))
    assert status == JobStatus.FAILED
    assert info["job"] == f"{SAMPLE}.fail"
    assert (info["type"], info["message"]) == ("ValueError", "bad input")
    assert "raise ValueError" in str(info["traceback"])


def test_unregistered_job_is_refused_and_not_run(tmp_path: Path) -> None:
    target = tmp_path / "ran.txt"
    status, info = run(body("not_a_job", str(target)))
    assert status == JobStatus.REFUSED
    assert info["type"] == "JobNotAllowed"
    assert info["job"] == f"{SAMPLE}.not_a_job"
    assert not target.exists()


def test_module_outside_registry_is_refused_even_if_importable() -> None:
    status, info = run(body("system", "true", path="os"))
    assert (status, info["type"]) == (JobStatus.REFUSED, "JobNotAllowed")


def test_invalid_body_is_refused() -> None:
    status, info = run("not json")
    assert (status, info["type"]) == (JobStatus.REFUSED, "InvalidJob")
    status, info = run('["run", {"path": "x"}]')
    assert (status, info["type"]) == (JobStatus.REFUSED, "InvalidJob")


def test_allowed_module_runs_class_method() -> None:
    text = json.dumps(
        ["run", {"path": f"{SAMPLE}:Adder", "callable": "add", "args": [5], "class_args": [10]}]
    )
    assert run(text, allowed=(SAMPLE,)) == (JobStatus.OK, {"value": 15})


def test_allowed_module_with_missing_callable_fails() -> None:
    status, info = run(body("nope", path=SAMPLE), allowed=(SAMPLE,))
    assert (status, info["type"]) == (JobStatus.FAILED, "JobNotFound")


def test_unserialisable_return_value_is_a_serialization_error() -> None:
    status, info = run(body("unserialisable"))
    assert (status, info["type"]) == (JobStatus.FAILED, "SerializationError")
    assert "unserialisable" in str(info["message"])


def test_hooks_run_around_each_job_even_when_it_fails() -> None:
    calls: list[str] = []
    hooks = Hooks(
        before_job=lambda: calls.append("before"), after_job=lambda: calls.append("after")
    )
    runner = JobRunner((), hooks)
    assert runner.run(body("add", 1, 1))[0] == JobStatus.OK
    assert runner.run(body("fail"))[0] == JobStatus.FAILED
    assert calls == ["before", "after", "before", "after"]


def test_refused_job_does_not_call_hooks() -> None:
    calls: list[str] = []
    runner = JobRunner((), Hooks(before_job=lambda: calls.append("before")))
    assert runner.run(body("not_a_job", "/nonexistent"))[0] == JobStatus.REFUSED
    assert calls == []


def test_load_hooks_uses_what_the_module_defines() -> None:
    hooks = load_hooks("tests.jobs_fixtures.hooks")
    assert hooks.setup.__name__ == "setup"
    assert load_hooks(None) == Hooks()
    with pytest.raises(ImportError):
        load_hooks("tests.jobs_fixtures.no_such_hooks")


def test_result_codec_round_trip() -> None:
    data = pipe.encode_result(b"42", JobStatus.OK, '{"value":"a\\nb"}')
    assert pipe.decode_result(data) == (42, JobStatus.OK, '{"value":"a\\nb"}')
    assert pipe.encode_job(7, '["run",{}]') == b'J7\n["run",{}]'


class PipeEnd:
    """The job manager's end of a socketpair whose other end a serve() thread reads."""

    def __init__(self, runner: JobRunner) -> None:
        self.ours, theirs = socket.socketpair()
        #: The records pipe (only read when the runner's hooks record results).
        self.records, records_theirs = socket.socketpair()
        records_fd = records_theirs.fileno() if runner.hooks.record_results else None
        #: What serve() raised.
        self.errors: list[BaseException] = []

        def serve() -> None:
            try:
                worker_process.serve(theirs.fileno(), runner, records_fd)
            except BaseException as exc:
                self.errors.append(exc)

        self.thread = threading.Thread(target=serve)
        self._theirs = (theirs, records_theirs)
        self.reader = FrameReader(self.ours.fileno())
        self.frames: list[bytes] = []
        self.thread.start()

    def write(self, *frames: bytes) -> None:
        write_all(self.ours.fileno(), b"".join(frame(f) for f in frames))

    def read_until(self, n: int) -> list[bytes]:
        def enough() -> bool:
            if select.select([self.ours], [], [], 0.05)[0]:
                self.frames.extend(self.reader.read())
            return len(self.frames) >= n

        wait_for(enough, 10, f"{n} frames from serve()")
        return self.frames

    def close(self) -> None:
        self.ours.close()
        self.records.close()
        self.thread.join(10)
        for end in self._theirs:
            end.close()


def test_serve_skips_a_queued_job_that_is_cancelled_before_it_starts() -> None:
    end = PipeEnd(JobRunner())
    try:
        # One write, read in one go: the cancel is seen before job 2 would start.
        end.write(
            pipe.encode_job(1, body("add", 1, 1)),
            pipe.encode_job(2, body("add", 2, 2)),
            b"C2",
            pipe.encode_job(3, body("add", 3, 3)),
        )
        results = [pipe.decode_result(f) for f in end.read_until(3)]
    finally:
        end.close()
    assert (2, JobStatus.CANCELLED, "") in results
    assert (1, JobStatus.OK, '{"value":2}') in results and (
        3,
        JobStatus.OK,
        '{"value":6}',
    ) in results
    assert len(results) == 3


def test_serve_writes_records_while_a_job_runs_and_acknowledges() -> None:
    seen: list[list[dict[str, object]]] = []
    recorded = threading.Event()
    waited: list[bool] = []

    def record(batch: list[dict[str, object]]) -> None:
        seen.append(batch)
        recorded.set()

    # The job (its before_job hook) runs until the records batch has been written.
    hooks = Hooks(before_job=lambda: waited.append(recorded.wait(10)), record_results=record)
    end = PipeEnd(JobRunner((), hooks))
    try:
        end.write(pipe.encode_job(1, body("noop")))
        write_all(end.records.fileno(), frame(pipe.encode_records([{"msgid": "a"}])))
        frames = end.read_until(2)
    finally:
        end.close()
    assert waited == [True]
    assert seen == [[{"msgid": "a"}]]
    done = pipe.encode_result(b"1", JobStatus.OK, '{"value":null}')
    assert sorted(frames) == sorted([pipe.RECORDED, done])


def test_serve_with_a_records_pipe_exits_cleanly() -> None:
    """Stopping writes what waits on the records pipe while its thread is waiting on it."""
    seen: list[list[dict[str, object]]] = []
    end = PipeEnd(JobRunner((), Hooks(record_results=seen.append)))
    end.write(pipe.encode_job(1, body("noop")))
    end.read_until(1)  # serve() is running, its records thread waiting
    end.write(pipe.EXIT)
    end.thread.join(10)
    end.close()
    assert not end.thread.is_alive()
    assert end.errors == []


def test_serve_exits_after_the_jobs_before_exit() -> None:
    end = PipeEnd(JobRunner())
    end.write(pipe.encode_job(1, body("add", 1, 2)), pipe.EXIT, pipe.encode_job(2, body("noop")))
    frames = end.read_until(1)
    end.thread.join(10)
    assert not end.thread.is_alive()
    end.close()
    assert [pipe.decode_result(f)[0] for f in frames] == [1]


def test_frame_reader_joins_split_frames_and_splits_joined_ones() -> None:
    ours, theirs = socket.socketpair()
    try:
        data = frame(b"first") + frame(b"second")
        reader = FrameReader(theirs.fileno())
        ours.sendall(data[:7])
        assert reader.read() == []
        ours.sendall(data[7:])
        assert reader.read() == [b"first", b"second"]
        ours.close()
        with pytest.raises(EOFError):
            reader.read()
    finally:
        theirs.close()


def test_bodies_past_the_configured_depth_or_size_are_refused_unrun(tmp_path: Path) -> None:
    ran = tmp_path / "ran.txt"
    runner = JobRunner((), max_json_depth=4, max_body_bytes=200)
    deep = body("record", str(ran), [[[["deep"]]]])
    status, payload = runner.run(deep)
    assert status == JobStatus.REFUSED and json.loads(payload)["type"] == "InvalidJob"
    big = body("record", str(ran), "x" * 300)
    status, payload = runner.run(big)
    assert status == JobStatus.REFUSED and json.loads(payload)["type"] == "InvalidJob"
    assert not ran.exists()
    # The same bodies run under the defaults.
    assert JobRunner().run(deep)[0] == JobStatus.OK and JobRunner().run(big)[0] == JobStatus.OK
