"""Stacks of the end-to-end tests: a router and job managers as real processes.

:class:`RouterStack` runs them as ``python -m django_eventmq`` (no Django) and the
test starts its job managers; :class:`DjangoStack` runs them as ``python -m django``
with a settings module on one SQLite file. :func:`running` stops a stack's processes
after it, :func:`client_of` points this process's client at its router meanwhile.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

from django_eventmq.client import connection
from tests.support import Proc, ResultStack, python_module, tcp_addr
from tests.system.chaos.support import admin_call, start_router


class Stack(Protocol):
    frontend: str

    def stop(self) -> None: ...


S = TypeVar("S", bound=Stack)


class RouterStack:
    """A router on fresh loopback addresses with its journal in ``tmp`` (restartable on
    both); job managers for ``job_module`` only when the test starts them. All of
    them run with ``env`` added to their environment."""

    def __init__(self, tmp: Path, job_module: str, env: dict[str, str] | None = None) -> None:
        self.frontend, self.backend, self.admin = tcp_addr(), tcp_addr(), tcp_addr()
        self.journal = tmp / "journal.sqlite3"
        self.job_module = job_module
        self.env = env or {}
        self.procs: list[Proc] = []
        self.router = self.start_router()

    def start_router(self) -> Proc:
        proc = start_router(self.frontend, self.backend, self.admin, self.journal, **self.env)
        self.procs.append(proc)
        return proc

    def start_jobmanager(self, concurrency: int = 2, queues: str = "") -> None:
        """A job manager of ``concurrency`` children (serving ``queues``, default: the default)."""
        self.procs.append(
            Proc(
                python_module(
                    "jobmanager", "--broker", self.backend, "--concurrency", str(concurrency),
                    "--job-module", self.job_module, *(["--queues", queues] if queues else []),
                ),
                env=self.env,
            )
        )  # fmt: skip

    def monitor(self) -> dict[str, Any]:
        return admin_call(self.admin, "MONITOR")

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()


class DjangoStack(ResultStack):
    """Processes started as ``python -m django COMMAND ...`` with ``env`` (a Django
    settings module on the SQLite file ``db``, where the job managers record results)."""

    env: dict[str, str]
    frontend: str

    def _start(self, *args: str) -> Proc:
        proc = Proc([sys.executable, "-m", "django", *args], env=self.env)
        self.procs.append(proc)
        return proc


@contextmanager
def running(stack: S) -> Iterator[S]:
    """``stack``, its processes stopped afterwards."""
    try:
        yield stack
    finally:
        stack.stop()


@contextmanager
def client_of(stack: S, eventmq_settings: Any, **settings: Any) -> Iterator[S]:
    """``stack`` with this process's client sending to its router (and ``settings``);
    the client's connections closed afterwards."""
    try:
        eventmq_settings(BROKER_ADDR=stack.frontend, **settings)
        yield stack
    finally:
        connection.close_clients()


@contextmanager
def serving(stack: S, eventmq_settings: Any) -> Iterator[S]:
    """``stack`` with this process's client sending to it; its processes stopped after."""
    with running(stack), client_of(stack, eventmq_settings):
        yield stack
