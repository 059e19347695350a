"""A real router and job manager (``python -m django_eventmq``) serving :mod:`.limits`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.jobs_fixtures import limits
from tests.support import ROOT, Proc, clean_environ, python_module
from tests.system.streaming.conftest import start_router


@contextmanager
def router_and_jobmanager(
    journal: Path, concurrency: int, job_module: str = limits.MODULE, *options: str
) -> Iterator[tuple[str, Proc]]:
    """``(frontend address, router process)``; both processes stopped on exit.
    ``job_module``: the jobs it serves (:mod:`.limits` unless told); ``options``: more
    of the job manager's."""
    env = {**clean_environ(), "PYTHONPATH": str(ROOT)}
    router, front, backend = start_router(journal, env=env)
    procs = [router]
    try:
        serving = ("--job-module", job_module, "--concurrency", str(concurrency), *options)
        jobmanager = Proc(python_module("jobmanager", "--broker", backend, *serving), env=env)
        procs.append(jobmanager)
        jobmanager.wait_output(r"jobmanager ready: ", timeout=60)
        yield front, router
    finally:
        for proc in reversed(procs):
            proc.stop()
