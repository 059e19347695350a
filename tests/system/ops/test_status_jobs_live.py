"""What runs right now: ``emq_status --jobs`` (text and ``--json``) and the admin
dashboard list the jobs a real router handed out to a real job manager, the
running one with its worker process's pid, the prefetched one behind it."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse

from django_eventmq.admin import dashboard as admin_dashboard
from django_eventmq.client.connection import Client
from tests.support import ROOT, python_module, wait_for

from .conftest import JOBS, Site, start_jobmanager, start_router


@dataclass
class Held:
    site: Site
    running: str
    prefetched: str
    pid: int


@pytest.fixture
def held(tmp_path: Path) -> Iterator[Held]:
    """One worker process running a long job, a second job prefetched behind it."""
    router, (frontend, backend, admin) = start_router()
    jobmanager = start_jobmanager(
        backend, "--concurrency", "1", "--prefetch", "1", "--prefetch-budget", "0"
    )
    client = Client(frontend)
    flag = tmp_path / "release"
    try:
        jobmanager.wait_output(r"jobmanager connected")
        site = Site(frontend, backend, admin, router, jobmanager, client)
        first = site.send("default", "hold_noting_pid", str(flag), str(tmp_path / "first"))
        second = site.send("default", "hold_noting_pid", str(flag), str(tmp_path / "second"))
        pidfile = tmp_path / "first"
        wait_for(pidfile.exists, 60, "the first job running")
        yield Held(site, first, second, int(pidfile.read_text()))
    finally:
        flag.touch()
        client.channel.close()
        jobmanager.stop()
        router.stop()


def status(*args: str) -> str:
    done = subprocess.run(
        python_module("status", *args), capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def both_shown(read: Callable[[], list[dict[str, Any]]], held: Held) -> list[dict[str, Any]] | None:
    """The jobs ``read()`` lists once the running job shows as running beside the
    prefetched one (a job manager reports what runs within half a second)."""
    jobs = read()
    by_msgid = {j["msgid"]: j for j in jobs}
    running = by_msgid.get(held.running, {})
    return jobs if running.get("state") == "running" and held.prefetched in by_msgid else None


def test_status_jobs_lists_the_running_job_with_its_pid_and_the_prefetched_one(
    held: Held,
) -> None:
    admin = held.site.admin

    def jobs() -> list[dict[str, Any]]:
        return list(json.loads(status("--admin", admin, "--jobs", "--json"))["jobs"])

    rows = wait_for(lambda: both_shown(jobs, held), 30, "both jobs")
    assert len(rows) == 2
    by_msgid = {j["msgid"]: j for j in rows}
    running, prefetched = by_msgid[held.running], by_msgid[held.prefetched]
    job = f"{JOBS}.hold_noting_pid"
    assert {k: running[k] for k in ("job", "queue", "state", "pid")} == {
        "job": job,
        "queue": "default",
        "state": "running",
        "pid": held.pid,
    }
    assert {k: prefetched[k] for k in ("job", "queue", "state", "pid")} == {
        "job": job,
        "queue": "default",
        "state": "prefetched",
        "pid": None,
    }
    assert running["jobmanager"] == prefetched["jobmanager"]
    assert running["jobmanager"].startswith("jm-")  # as the job managers' table names it
    assert running["age"] >= 0 and prefetched["age"] >= 0
    # The table: one row each, the running one with its pid, the other with none.
    text = status("--admin", admin, "--jobs")
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("MSGID"))
    assert header.split() == ["MSGID", "JOB", "QUEUE", "JOB", "MANAGER", "STATE", "PID", "AGE"]
    first = next(line.split() for line in lines if line.startswith(held.running))
    second = next(line.split() for line in lines if line.startswith(held.prefetched))
    assert first[1:3] == [job, "default"] and first[4:6] == ["running", str(held.pid)]
    assert second[1:3] == [job, "default"] and second[4:6] == ["prefetched", "-"]
    # Without --jobs the view is as before.
    assert "MSGID" not in status("--admin", admin)


@pytest.mark.django_db
def test_the_dashboard_shows_the_same_jobs(
    held: Held, admin_client: Any, eventmq_settings: Any
) -> None:
    eventmq_settings(ADMIN_ADDR=held.site.admin)
    admin_dashboard.samples.clear()
    data_url = reverse("admin:django_eventmq_dashboard_data")

    def jobs() -> list[dict[str, Any]]:
        return list(admin_client.get(data_url).json()["router"]["jobs"])

    rows = wait_for(lambda: both_shown(jobs, held), 30, "both jobs")
    by_msgid = {j["msgid"]: j for j in rows}
    assert by_msgid[held.running]["pid"] == held.pid
    assert by_msgid[held.prefetched]["state"] == "prefetched"
    page = admin_client.get(reverse("admin:django_eventmq_dashboard")).content.decode()
    assert 'id="emq-jobs"' in page
    assert "Jobs running or prefetched" in page
    admin_dashboard.samples.clear()
