"""Per-job retry policy end to end: ``emq_router`` and ``emq_jobmanager`` (Django,
results recorded in an SQLite file) as real processes on loopback, a client
sending with ``.delay()``.

The stack runs with ``RETRY_BACKOFF_BASE=60``: a retry that waited for the
global back-off would not come within a test's deadline, so each retry seen
here was timed by the job's own policy (or its ``raise Retry``).
"""

from __future__ import annotations

import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from django_eventmq.errors import JobError
from django_eventmq.router.journal.schema import DELAYED
from django_eventmq.runtime import admin_client
from tests.support import ROOT, Proc, migrated_env, tcp_addr, wait_for
from tests.system.e2e import retry_jobs
from tests.system.e2e.retry_jobs import runs
from tests.system.e2e.stack import DjangoStack, client_of, running


@pytest.fixture(scope="module")
def db_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("retry-policy")
    return migrated_env(
        {
            "DJANGO_SETTINGS_MODULE": "tests.system.e2e.retry_settings",
            "EMQ_RETRY_DB": str(tmp / "db.sqlite3"),
            "PYTHONPATH": str(ROOT),
            "EMQ_RETRY_BACKOFF_BASE": "60",
        }
    )


class Stack(DjangoStack):
    """A router (restartable on the same addresses and journal) and a job manager."""

    def __init__(self, env: dict[str, str], journal: Path) -> None:
        self.env = {**env, "EMQ_JOURNAL_PATH": str(journal)}
        self.db = Path(env["EMQ_RETRY_DB"])
        self.frontend, self.backend, self.admin = tcp_addr(), tcp_addr(), tcp_addr()
        self.procs: list[Proc] = []
        self.router = self.start_router()
        jobmanager = self._start("emq_jobmanager", "--broker", self.backend, "--concurrency", "2")
        jobmanager.wait_output(r"jobmanager ready: ", timeout=60)

    def start_router(self) -> Proc:
        router = self._start(
            "emq_router", "--frontend", self.frontend, "--backend", self.backend,
            "--admin", self.admin,
        )  # fmt: skip
        router.wait_output(r"router ready")
        return router

    def delayed(self) -> int:
        """Jobs the router holds delayed (MONITOR), retries waiting for their time included."""
        return int(admin_client.ask(self.admin, "MONITOR")["delayed"])

    def retried(self) -> int:
        """Retries the router counted in queue ``default`` (STATUS, as emq_status shows)."""
        counts = admin_client.ask(self.admin, "STATUS")["retried_messages_by_queue"]
        return int(counts.get("default", 0))

    def row_when(self, msgid: str, status: str) -> dict[str, Any]:
        return self.wait_row(msgid, lambda row: row["status"] == status, f"status {status}")


@pytest.fixture(scope="module")
def stack(db_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    journal = tmp_path_factory.mktemp("retry-journal") / "journal.sqlite3"
    with running(Stack(db_env, journal)) as made:
        yield made


@pytest.fixture
def use(eventmq_settings: Any, stack: Stack) -> Iterator[Stack]:
    with client_of(stack, eventmq_settings, ACK_TIMEOUT=5):
        yield stack


def test_a_listed_exception_is_retried_until_the_job_succeeds(use: Stack, tmp_path: Path) -> None:
    log = tmp_path / "runs"
    handle = retry_jobs.flaky.delay(str(log), 2)
    assert handle.wait(timeout=30) == "done"
    row = use.row_when(handle, "succeeded")
    assert row["attempts"] == 3
    assert len(runs(log)) == 3


def test_an_exception_not_listed_fails_at_once(use: Stack, tmp_path: Path) -> None:
    log = tmp_path / "runs"
    handle = retry_jobs.wrong_kind.delay(str(log))
    with pytest.raises(JobError) as caught:
        handle.wait(timeout=30)
    assert caught.value.exc_type == "ValueError"
    row = use.row_when(handle, "failed")
    assert row["attempts"] == 1
    assert len(runs(log)) == 1  # retry_count=5 left unused


def test_raise_retry_is_held_by_the_router_for_its_delay(use: Stack, tmp_path: Path) -> None:
    log = tmp_path / "runs"
    retried = use.retried()
    handle = retry_jobs.asks_again.delay(str(log), 1, 1.0)
    wait_for(lambda: use.delayed() == 1, 10, "the retry held delayed by the router")
    assert use.retried() == retried + 1  # emq_status counts it
    assert handle.wait(timeout=30) == "ready"
    first, second = runs(log)
    assert second - first >= 1.0  # the router held it that long
    assert use.row_when(handle, "succeeded")["attempts"] == 2


def test_an_async_job_raising_retry_runs_again(use: Stack, tmp_path: Path) -> None:
    log = tmp_path / "runs"
    assert retry_jobs.async_asks_again.delay(str(log), 2, 0.2).wait(timeout=30) == "ready"
    assert len(runs(log)) == 3
    flaky_log = tmp_path / "flaky"
    handle = retry_jobs.async_flaky.delay(str(flaky_log), 1)
    assert handle.wait(timeout=30) == "done"
    assert use.row_when(handle, "succeeded")["attempts"] == 2


def test_a_job_that_always_asks_again_stops_at_its_retry_count(use: Stack, tmp_path: Path) -> None:
    log = tmp_path / "runs"
    handle = retry_jobs.always_asks.delay(str(log))
    with pytest.raises(JobError) as caught:
        handle.wait(timeout=30)
    assert caught.value.exc_type == "Retry"
    assert use.row_when(handle, "failed")["attempts"] == 3  # retry_count=2: three runs
    assert len(runs(log)) == 3


def test_max_delay_caps_the_global_backoff(use: Stack, tmp_path: Path) -> None:
    log = tmp_path / "runs"
    handle = retry_jobs.capped.delay(str(log), 2)  # RETRY_BACKOFF_BASE=60, capped at 0.3 s
    assert handle.wait(timeout=30) == "done"
    assert use.row_when(handle, "succeeded")["attempts"] == 3


def _journal_row(journal: Path, msgid: str) -> tuple[int, float] | None:
    """``(state, due)`` of ``msgid`` in the journal file (read-only), None if not there."""
    db = sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=10)
    try:
        found = db.execute("SELECT state, due FROM jobs WHERE msgid = ?", (msgid,)).fetchone()
    finally:
        db.close()
    return (int(found[0]), float(found[1])) if found else None


def test_a_delayed_retry_survives_a_router_restart(use: Stack, tmp_path: Path) -> None:
    log = tmp_path / "runs"
    handle = retry_jobs.asks_again.delay(str(log), 1, 2.0)
    journal = Path(use.env["EMQ_JOURNAL_PATH"])
    stored = wait_for(
        lambda: (row := _journal_row(journal, handle)) and row[0] == DELAYED and row,
        10,
        "the retry stored in the journal as delayed",
    )
    use.router.signal(signal.SIGKILL)  # no goodbye: only the journal knows the retry
    use.router.stop()
    use.procs.remove(use.router)
    use.router = use.start_router()
    use.router.wait_output(r"1 delayed")  # recovered from the journal as delayed
    wait_for(lambda: len(runs(log)) == 2, 30, "the retried run after the restart")
    first, second = runs(log)
    assert second >= stored[1] > first  # not before the due time the journal kept
    row = use.row_when(handle, "succeeded")
    assert row["attempts"] == 2
    assert len(runs(log)) == 2
