"""Jobs registered with ``@job`` for the job manager tests."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from django_eventmq.client.jobs import job


@job
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


@job
def add(a: int, b: int) -> int:
    return a + b


@job
def noop() -> None:
    return None


@job
def fail(message: str = "boom") -> None:
    raise ValueError(message)


@job
def slow(seconds: float, path: str = "") -> str:
    """Note the start, sleep (the job's own work), then note that it finished."""
    if path:
        record(path, "start")
    time.sleep(seconds)
    if path:
        record(path, "done")
    return f"slept {seconds}"


@job
def crash(code: int = 3) -> None:
    os._exit(code)


@job
def record(path: str, value: Any) -> int:
    """Append ``value`` (and our pid) to ``path`` so a test can see the job ran."""
    with Path(path).open("a") as fh:
        fh.write(f"{value} {os.getpid()}\n")
    return os.getpid()


@job
def pid() -> int:
    return os.getpid()


@job
def unserialisable() -> object:
    return object()


class Adder:
    """Addressed as ``tests.jobs_fixtures.sample:Adder`` through ALLOWED_JOB_MODULES."""

    def __init__(self, base: int = 0) -> None:
        self.base = base

    def add(self, x: int) -> int:
        return self.base + x


def not_a_job(path: str) -> None:
    """Not registered: a job manager must refuse to run it."""
    record(path, "ran")


@job
def flaky(path: str, failures: int) -> int:
    """Fail the first ``failures`` calls (counted in the file at ``path``), then succeed."""
    counter = Path(path)
    calls = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(calls))
    if calls <= failures:
        raise RuntimeError(f"failure {calls} of {failures}")
    return calls
