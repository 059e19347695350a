"""The transactional outbox with real processes, on SQLite and on PostgreSQL.

A router, one job manager (one worker, nothing prefetched: jobs run in the
order the router got them), a scheduler (the relay) and a sending process
(:mod:`.outbox_client`) that writes a user and an outbox job in one transaction.
A job's runs are lines in a file. Each test ends with a plain job sent last: once
it ran, every copy of the jobs before it that reached the router ran too, so the
counts are final.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pg_support import require_postgres
from tests.support import ROOT, Proc, clean_environ, migrated_env, wait_for
from tests.system.e2e.workflow_stack import WorkflowStack, lines

SETTINGS = "tests.system.e2e.outbox_settings"


class OutboxStack(WorkflowStack):
    """The workflow tests' router and job managers, with a scheduler and a sender."""

    scheduler: Proc | None = None

    def start_scheduler(self) -> Proc:
        self.scheduler = self._start("emq_scheduler")
        self.scheduler.wait_output(r"scheduler ready", timeout=60)
        return self.scheduler

    def stop_scheduler(self) -> None:
        if self.scheduler is not None:
            self.scheduler.stop()
            self.scheduler = None

    def send(self, mode: str, log: Path, tag: str) -> tuple[int, list[str]]:
        """Run the sending process; its exit code and the lines it printed."""
        done = subprocess.run(
            [sys.executable, "-m", "tests.system.e2e.outbox_client", mode, str(log), tag],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
            # An ACK slower than ACK_TIMEOUT on a loaded machine would leave the row
            # to the relay: these tests mean the sender's own send to be answered.
            env={**clean_environ(), **self.env, "EMQ_ACK_TIMEOUT": "15"},
            check=False,
        )
        assert done.returncode in (0, -signal.SIGKILL), f"{done.stdout}{done.stderr}"
        return done.returncode, done.stdout.split()

    def relayed(self, msgid: str) -> bool:
        """True if the scheduler logged that it relayed ``msgid``."""
        assert self.scheduler is not None
        return f"relayed outbox job msgid {msgid}" in self.scheduler.output()

    def outbox(self) -> list[str]:
        return [r["msgid"] for r in self.query("SELECT msgid FROM django_eventmq_outboxjob")]

    def users(self, tag: str) -> int:
        return len(self.query("SELECT id FROM auth_user WHERE username = ?", tag))

    def finish(self, log: Path) -> Counter[str]:
        """Send a plain job last, wait for it to run; the runs of every job, counted."""
        self.send("plain", log, "last")
        wait_for(lambda: "last" in lines(log), 60, f"the last job to run\n{self.logs()}")
        return Counter(lines(log))


def _env(tmp: Path, pg_name: str = "") -> dict[str, str]:
    env = {
        "DJANGO_SETTINGS_MODULE": SETTINGS,
        "EMQ_WF_DB": str(tmp / "db.sqlite3"),
        "PYTHONPATH": str(ROOT),
        # The relay sends a row its process left after 1 s.
        "EMQ_OUTBOX_RELAY_AFTER": "1",
    }
    if pg_name:
        env["EMQ_WF_PG_NAME"] = pg_name
    return migrated_env(env)


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OutboxStack]:
    tmp = tmp_path_factory.mktemp(f"outbox-{request.param}")
    pg_name = ""
    if request.param == "postgres":
        import psycopg

        dsn = require_postgres()
        pg_name = "emq_outbox_" + uuid.uuid4().hex[:12]
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{pg_name}"')
    made: OutboxStack | None = None
    try:
        made = OutboxStack(_env(tmp, pg_name), tmp / "journal.sqlite3")
        made.start_jobmanager(concurrency=1, prefetch=0)
        yield made
    finally:
        if made is not None:
            made.stop()
        if pg_name:
            with psycopg.connect(dsn, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{pg_name}" WITH (FORCE)')


@pytest.fixture
def fresh(stack: OutboxStack) -> Iterator[OutboxStack]:
    """The stack with no scheduler running and an empty outbox; the scheduler stopped after."""
    assert stack.outbox() == []
    try:
        yield stack
    finally:
        stack.stop_scheduler()


def _killed(stack: OutboxStack, mode: str, log: Path, tag: str) -> str:
    """Run the sender in ``mode``, which kills it; the msgid it printed."""
    code, printed = stack.send(mode, log, tag)
    assert code == -signal.SIGKILL, printed
    return printed[0]


def _relay(stack: OutboxStack, msgid: str) -> None:
    """Start the scheduler; wait until it relayed ``msgid`` and the router took it."""
    stack.start_scheduler()
    wait_for(lambda: stack.outbox() == [], 60, f"the relay to send {msgid}\n{stack.logs()}")
    assert stack.relayed(msgid)


def test_a_sender_killed_between_its_commit_and_its_send_loses_nothing(
    fresh: OutboxStack, tmp_path: Path
) -> None:
    log = tmp_path / "ran"
    msgid = _killed(fresh, "kill", log, "killed")
    # Committed with the user, never sent: without a relay it would be lost.
    assert fresh.users("killed") == 1
    assert fresh.outbox() == [msgid]
    _relay(fresh, msgid)
    assert fresh.finish(log) == Counter({"killed": 1, "last": 1}), fresh.logs()


def test_a_job_sent_by_its_process_and_again_by_the_relay_runs_once(
    fresh: OutboxStack, tmp_path: Path
) -> None:
    log = tmp_path / "ran"
    msgid = _killed(fresh, "kill-before-delete", log, "twice")
    # The router acknowledged it (the process was killed as it deleted the row after
    # the ACK): the job runs; its row is left for the relay, which sends it again.
    wait_for(lambda: "twice" in lines(log), 60, f"the job to run\n{fresh.logs()}")
    assert fresh.outbox() == [msgid]
    _relay(fresh, msgid)
    assert fresh.finish(log) == Counter({"twice": 1, "last": 1}), fresh.logs()


def test_a_rollback_leaves_no_row_and_no_job(fresh: OutboxStack, tmp_path: Path) -> None:
    fresh.start_scheduler()
    log = tmp_path / "ran"
    code, printed = fresh.send("rollback", log, "rolled")
    assert code == 0 and printed[1] == "rolled_back", printed
    assert fresh.users("rolled") == 0
    assert fresh.outbox() == []
    code, printed = fresh.send("send", log, "sent")
    assert code == 0 and printed[1] == "committed", printed
    # Sent at the commit and acknowledged: its row is gone before the process ended.
    assert fresh.outbox() == []
    assert fresh.finish(log) == Counter({"sent": 1, "last": 1}), fresh.logs()
    assert not fresh.relayed(printed[0])
