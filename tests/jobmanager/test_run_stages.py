"""Features as run stages in the worker child (jobmanager/run_stages.py): a stage given
to the runner is called at each point of a run; an untraced run never calls a stage
that wants traced runs only. In-process, no child."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from django_eventmq.jobmanager.job_hooks import Hooks
from django_eventmq.jobmanager.job_runner import JobRunner
from django_eventmq.jobmanager.run_stages import RunStage
from django_eventmq.protocol.status import JobStatus
from django_eventmq.runtime.job_context import Running
from django_eventmq.runtime.registry import import_job_modules
from tests.fake_router import SAMPLE, body

import_job_modules([SAMPLE])


class _Probe(RunStage):
    """A new feature: notes each point it is called at (traced runs only, if asked)."""

    def __init__(self, *, traced_only: bool = False) -> None:
        self.traced_only = traced_only
        self.seen: list[str] = []

    def wants(self, traced: bool) -> bool:
        return traced or not self.traced_only

    def around(self, carrier: bytes) -> AbstractContextManager[object]:
        @contextmanager
        def span() -> Iterator[None]:
            self.seen.append(f"around {carrier.decode()}")
            yield
            self.seen.append("around end")

        return span()

    def named(self, name: str) -> None:
        self.seen.append(f"named {name.rsplit('.', 1)[-1]}")

    def before(self, running: Running) -> None:
        self.seen.append("before")

    def after(self, running: Running) -> None:
        self.seen.append("after")

    def succeeded(self, running: Running, value: Any) -> None:
        self.seen.append(f"succeeded {value}")

    def failed(self, running: Running, exc: BaseException, advice: dict[str, Any]) -> None:
        self.seen.append(f"failed {type(exc).__name__}")

    def error(self, exc: BaseException) -> None:
        self.seen.append(f"error {type(exc).__name__}")


def test_a_run_stage_is_called_at_each_point_of_a_run() -> None:
    probe = _Probe()
    runner = JobRunner(stages=(probe,))  # the one registration of a new run feature
    assert runner.run(body("add", 1, 2))[0] == JobStatus.OK
    assert probe.seen == ["named add", "before", "after", "succeeded 3"]
    probe.seen.clear()
    assert runner.run(body("fail"))[0] == JobStatus.FAILED
    assert probe.seen == ["named fail", "before", "after", "failed ValueError", "error ValueError"]
    probe.seen.clear()
    assert runner.run(body("add", 1, 2), trace=b"t")[0] == JobStatus.OK
    assert probe.seen[0] == "around t" and probe.seen[-1] == "around end"


def test_a_stage_for_traced_runs_is_not_called_for_an_untraced_one() -> None:
    probe = _Probe(traced_only=True)
    runner = JobRunner(stages=(probe,))
    runner.run(body("add", 1, 2))
    assert probe.seen == []
    runner.run(body("not_a_job", "/nonexistent"), trace=b"t")  # refused: named, error
    assert probe.seen == ["around t", "named not_a_job", "error JobNotAllowed", "around end"]


def test_hooks_before_and_after_a_job_are_a_stage_only_when_the_module_has_them() -> None:
    assert Hooks().around() is None
    calls: list[str] = []
    runner = JobRunner((), Hooks(after_job=lambda: calls.append("after")))
    runner.run(body("add", 1, 2))
    assert calls == ["after"]
