"""A real router and job manager (``python -m django_eventmq``) serving :mod:`.limits`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.jobs_fixtures import limits
from tests.support import ROOT, Proc, clean_environ, python_module
from tests.system.streaming.conftest import start_router


def pointer(eventmq_settings: Any, frontend: str) -> Callable[[], None]:
    """Points this process's client at ``frontend`` when called (in the test, after
    the settings fixture reset the settings)."""

    def point() -> None:
        eventmq_settings(BROKER_ADDR=frontend, ACK_TIMEOUT=5)

    return point


@contextmanager
def router_and_jobmanager(
    journal: Path, concurrency: int, *, module: str = limits.MODULE, extra: tuple[str, ...] = ()
) -> Iterator[tuple[str, Proc]]:
    """``(frontend address, router process)``; both processes stopped on exit.
    ``module``: the job module served (:mod:`.limits` unless told); ``extra``: more
    job manager options."""
    env = {**clean_environ(), "PYTHONPATH": str(ROOT)}
    router, front, backend = start_router(journal, env=env)
    procs = [router]
    try:
        serving = ("--job-module", module, "--concurrency", str(concurrency), *extra)
        jobmanager = Proc(python_module("jobmanager", "--broker", backend, *serving), env=env)
        procs.append(jobmanager)
        jobmanager.wait_output(r"jobmanager ready: ", timeout=60)
        yield front, router
    finally:
        for proc in reversed(procs):
            proc.stop()
