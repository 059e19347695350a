"""The example project end to end: manage.py emq_router + emq_jobmanager as real processes.

A view queues ``send_welcome`` and ``build_report``; the job manager's
workers (Django set up by the worker hooks) write the rows into a temporary
SQLite file, which the test reads until they appear.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.urls import reverse

from tests.support import ROOT, Proc, wait_for

pytestmark = [pytest.mark.urls("example_project.urls"), pytest.mark.django_db]


def manage(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "manage.py"), *args]


@pytest.fixture
def site_db(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """A migrated SQLite file for the example site, and the environment that selects it."""
    db = tmp_path / "example.sqlite3"
    env = {
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
        "DATABASE_URL": f"sqlite:///{db}",
        "DEBUG": "true",
    }
    done = subprocess.run(
        manage("migrate", "--noinput"),
        cwd=ROOT,
        env={**_clean_environ(), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    yield db, env


def _clean_environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}


@pytest.fixture
def processes(site_db) -> Iterator[tuple[str, list[Proc]]]:
    """emq_router and emq_jobmanager running against the example site; yields the frontend."""
    _db, env = site_db
    # Port 0 ("*"): the router picks free ports and logs them, so no other
    # process can take a port between our choosing and its binding.
    any_port = "tcp://127.0.0.1:*"
    procs: list[Proc] = []
    try:
        router = Proc(
            manage(
                "emq_router", "--frontend", any_port, "--backend", any_port, "--admin", any_port
            ),
            env=env,
        )
        procs.append(router)
        ready = router.wait_output(r"router ready: frontend=(\S+) backend=(\S+) admin=(\S+)")
        frontend, backend = ready.group(1), ready.group(2)
        jobmanager = Proc(
            manage(
                "emq_jobmanager",
                "--broker",
                backend,
                "--queues",
                "email:30,reports:10,default:10",
                "--concurrency",
                "2",
            ),
            env=env,
        )
        procs.append(jobmanager)
        jobmanager.wait_output(r"jobmanager ready: ")
        yield frontend, procs
    finally:
        for proc in reversed(procs):
            proc.stop()


def count(db: Path, sql: str, *params: object) -> int:
    with sqlite3.connect(db, timeout=5) as conn:
        return int(conn.execute(sql, params).fetchone()[0])


def test_views_enqueue_and_the_job_manager_writes_rows(
    site_db, processes, client, eventmq_settings
):
    db, _env = site_db
    frontend, procs = processes
    eventmq_settings(BROKER_ADDR=frontend)

    response = client.post(reverse("shop:signup"), {"email": "e2e@example.com"})
    assert response.status_code == 302
    response = client.post(reverse("shop:report"), {"name": "e2e-report"})
    assert response.status_code == 302

    def logs() -> str:
        return "\n".join(f"--- {p.args[2]}\n{p.output()}" for p in procs)

    try:
        wait_for(
            lambda: count(
                db, 'SELECT count(*) FROM shop_sentemail WHERE "to" = ?', "e2e@example.com"
            ),
            30,
            "the SentEmail row written by send_welcome",
        )
        wait_for(
            lambda: count(db, "SELECT count(*) FROM shop_report WHERE name = ?", "e2e-report"),
            30,
            "the Report row written by build_report",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{logs()}") from None
    assert count(db, "SELECT count(*) FROM shop_sentemail") == 1
    assert count(db, "SELECT count(*) FROM shop_report") == 1
    # SIGTERM stops both cleanly: job manager first, then the router.
    for proc in reversed(procs):
        assert proc.stop() == 0, logs()
        assert "Traceback" not in proc.output(), logs()
