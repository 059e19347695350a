"""Dead letters end to end: a router, a job manager with Django workers recording into a
SQLite file, and the admin page used from a process of its own (dead_letters_admin.py).

- A job that fails all its retries is a dead letter; retried from the admin once it is
  fixed, it runs again under a new msgid and succeeds.
- A job that kills its worker POISON_AFTER (2) times is set aside by the router and shown
  on the same page; handed out again from there once fixed, it succeeds; another one
  purged from there is gone from the router's STATUS.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from django_eventmq.errors import JobError, JobRejected
from tests.support import ROOT, Proc, clean_environ, migrated_env, tcp_addr, wait_for
from tests.system.chaos.support import admin_call
from tests.system.e2e.dead_letter_jobs import fails_until_fixed, kills_its_worker_until_fixed
from tests.system.e2e.stack import DjangoStack, client_of, running

SETTINGS = "tests.django.results.e2e_settings"


class Stack(DjangoStack):
    """A router and a job manager as ``python -m django`` processes, on one SQLite file."""

    def __init__(self, tmp: Path) -> None:
        self.db = tmp / "db.sqlite3"
        self.frontend, backend, self.admin = tcp_addr(), tcp_addr(), tcp_addr()
        self.env = migrated_env(
            {
                "DJANGO_SETTINGS_MODULE": SETTINGS,
                "EMQ_LIFECYCLE_DB": str(self.db),
                "EMQ_JOURNAL_PATH": str(tmp / "journal.sqlite3"),
                "PYTHONPATH": str(ROOT),
                "EMQ_POISON_AFTER": "2",
                "EMQ_BROKER_ADDR": self.frontend,
                "EMQ_ADMIN_ADDR": self.admin,
            }
        )
        self.procs: list[Proc] = []
        ports = ("--frontend", self.frontend, "--backend", backend, "--admin", self.admin)
        self._start("emq_router", *ports).wait_output(r"router ready: ")
        self._start(
            "emq_jobmanager", "--broker", backend, "--concurrency", "1",
            "--job-module", "tests.system.e2e.dead_letter_jobs",
        ).wait_output(r"jobmanager ready: ", timeout=60)  # fmt: skip

    def admin_page(self, *args: str) -> str:
        """Run ``dead_letters_admin ARGS``; the page it printed (the status must be 200)."""
        done = subprocess.run(
            [sys.executable, "-m", "tests.system.e2e.dead_letters_admin", *args],
            capture_output=True, text=True, timeout=60, check=False, cwd=ROOT,
            env={**clean_environ(), **self.env},
        )  # fmt: skip
        assert done.returncode == 0 and done.stdout.startswith("200\n"), done.stdout + done.stderr
        return done.stdout

    def letter(self, msgid: str) -> dict[str, Any] | None:
        return self.row(msgid, "django_eventmq_deadletter")

    def poisoned(self) -> list[str]:
        return [p["msgid"] for p in admin_call(self.admin, "STATUS")["poisoned_messages"]]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running(Stack(tmp_path_factory.mktemp("dead_letters"))) as s:
        yield s


@pytest.fixture
def use(stack: Stack, eventmq_settings: Any) -> Iterator[Stack]:
    with client_of(stack, eventmq_settings, ACK_TIMEOUT=5):
        yield stack


def test_a_job_that_failed_all_its_retries_is_retried_from_the_admin_and_succeeds(
    use: Stack, tmp_path: Path
) -> None:
    fixed, runs = tmp_path / "fixed", tmp_path / "runs"
    # Sent with options of its own: the letter keeps them, for the retry.
    handle = fails_until_fixed.send((str(fixed), str(runs)), headers={"priority": 3, "timeout": 60})
    with pytest.raises(JobError, match="not fixed yet"):
        handle.wait(timeout=30)
    letter = wait_for(lambda: use.letter(handle.msgid), 30, what="the dead letter")
    assert (letter["reason"], letter["attempts"], letter["queue"]) == ("failed", 2, "default")
    assert json.loads(letter["headers"]) == {"priority": 3, "timeout": 60, "retry_count": 1}
    fixed.touch()
    page = use.admin_page("retry", handle.msgid)  # then the list, with the letter
    assert "Sent 1 job(s) again" in page and handle.msgid in page
    again = use.letter(handle.msgid)
    assert again is not None and again["retries"] == 1 and again["retried_msgid"]
    row = use.wait_row(again["retried_msgid"], lambda r: r["status"] == "succeeded", "success")
    assert row["job"] == "tests.system.e2e.dead_letter_jobs.fails_until_fixed"
    assert len(runs.read_text().splitlines()) == 3  # two attempts, then the retry


def poison(use: Stack, tmp_path: Path, name: str) -> tuple[str, Path]:
    """A job that kills its worker until ``tmp_path/name`` exists: poisoned by the router."""
    fixed = tmp_path / name
    handle = kills_its_worker_until_fixed.delay(str(fixed), str(tmp_path / f"{name}.runs"))
    with pytest.raises(JobRejected, match="2 time"):
        handle.wait(timeout=60)
    wait_for(lambda: handle.msgid in use.poisoned(), 10, what="the job listed as poisoned")
    return handle.msgid, fixed


def test_a_poisoned_job_is_listed_handed_out_again_and_another_purged_from_the_admin(
    use: Stack, tmp_path: Path
) -> None:
    msgid, fixed = poison(use, tmp_path, "first")
    page = use.admin_page("list")
    assert msgid in page and "kills_its_worker_until_fixed" in page
    fixed.touch()
    assert "1 poisoned job(s) handed out again" in use.admin_page("poisoned", "retry", msgid)
    use.wait_row(msgid, lambda r: r["status"] == "succeeded", "success")
    assert msgid not in use.poisoned()

    other, _ = poison(use, tmp_path, "second")
    assert "1 poisoned job(s) purged" in use.admin_page("poisoned", "purge", other)
    status = admin_call(use.admin, "STATUS")
    assert (status["poisoned_messages"], status["poisoned_messages_total"]) == ([], 0)
    assert admin_call(use.admin, "MONITOR")["poisoned"] == 0
