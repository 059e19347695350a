"""Real processes for the streaming tests: a router and a job manager
(``python -m django_eventmq``), whose worker children set Django up on a temporary
SQLite file and record results there; the tests read that file."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT, Proc, ResultStack, migrated_env, python_module

SETTINGS = "tests.system.streaming.e2e_settings"
ANY_PORT = "tcp://127.0.0.1:*"
JOBS = "tests.system.streaming.jobs"


@pytest.fixture(scope="module")
def db_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A migrated SQLite file and the environment that selects it."""
    tmp = tmp_path_factory.mktemp("streaming")
    return migrated_env(
        {
            "DJANGO_SETTINGS_MODULE": SETTINGS,
            "EMQ_STREAMING_DB": str(tmp / "db.sqlite3"),
            "PYTHONPATH": str(ROOT),
        }
    )


def start_router(
    journal: Path, *options: str, env: dict[str, str] | None = None
) -> tuple[Proc, str, str]:
    """A router on random loopback ports: ``(process, frontend, backend)``."""
    router = Proc(
        python_module(
            "router",
            "--frontend",
            ANY_PORT,
            "--backend",
            ANY_PORT,
            "--admin",
            ANY_PORT,
            "--journal",
            str(journal),
            *options,
        ),
        env=env,
    )
    ready = router.wait_output(r"router ready: frontend=(\S+) backend=(\S+) admin=(\S+)", 60)
    return router, ready.group(1), ready.group(2)


class Stack(ResultStack):
    """A router and a job manager with four workers recording to ``db``."""

    def __init__(self, env: dict[str, str], journal: Path) -> None:
        self.env = env
        self.db = Path(env["EMQ_STREAMING_DB"])
        self.procs: list[Proc] = []
        router, self.frontend, backend = start_router(journal, env=env)
        self.procs.append(router)
        jobmanager = Proc(
            python_module(
                "jobmanager",
                "--broker",
                backend,
                "--concurrency",
                "4",
                "--prefetch",
                "4",
                "--job-module",
                JOBS,
                "--hooks",
                "django_eventmq.worker_hooks",
            ),
            env=env,
        )
        self.procs.append(jobmanager)
        jobmanager.wait_output(r"jobmanager ready: ", timeout=60)

    #: Tests read rows with ``row_when(msgid, check, what)``.
    row_when = ResultStack.wait_row


@pytest.fixture(scope="module")
def stack(db_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = Stack(db_env, tmp_path_factory.mktemp("journal") / "journal.sqlite3")
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def use(eventmq_settings: Any) -> Callable[[Stack], Stack]:
    """Point this test's client at ``stack``."""

    def point(stack: Stack) -> Stack:
        eventmq_settings(BROKER_ADDR=stack.frontend, ACK_TIMEOUT=5)
        return stack

    return point
