"""A router and job managers as plain ``python -m django_eventmq`` processes (no Django),
for the end-to-end tests that start their job manager themselves."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from django_eventmq.client import connection as client
from tests.support import Proc, python_module, tcp_addr
from tests.system.chaos.support import admin_call, start_router

S = TypeVar("S", bound="RouterStack")


class RouterStack:
    """A router on fresh loopback addresses with its journal in ``tmp`` (restartable on
    both); job managers for ``job_module`` only when the test starts them."""

    def __init__(self, tmp: Path, job_module: str) -> None:
        self.frontend, self.backend, self.admin = tcp_addr(), tcp_addr(), tcp_addr()
        self.journal = tmp / "journal.sqlite3"
        self.job_module = job_module
        self.procs: list[Proc] = []
        self.router = self.start_router()

    def start_router(self) -> Proc:
        proc = start_router(self.frontend, self.backend, self.admin, self.journal)
        self.procs.append(proc)
        return proc

    def start_jobmanager(self) -> None:
        self.procs.append(
            Proc(
                python_module(
                    "jobmanager", "--broker", self.backend, "--concurrency", "2",
                    "--job-module", self.job_module,
                )
            )
        )  # fmt: skip

    def monitor(self) -> dict[str, Any]:
        return admin_call(self.admin, "MONITOR")


@contextmanager
def serving(stack: S, eventmq_settings: Any) -> Iterator[S]:
    """``stack`` with this process's client sending to it; its processes stopped after."""
    try:
        eventmq_settings(BROKER_ADDR=stack.frontend)
        yield stack
    finally:
        client.close_clients()
        for proc in reversed(stack.procs):
            proc.stop()
