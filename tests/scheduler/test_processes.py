"""Real processes on PostgreSQL: two schedulers side by side, admin edits, end to end.

Each test starts ``manage.py emq_scheduler`` processes on a throwaway
database; the fake router (a ROUTER socket in the test) or the real router
and job manager stand on the other side.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from django_eventmq.protocol import Request
from tests.support import ROOT, Proc, free_port, wait_for

from .conftest import PgDatabase
from .fakes import FakeRouter

pytestmark = pytest.mark.postgres
MANAGE = [sys.executable, str(ROOT / "manage.py")]


def admin_script(db: PgDatabase, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tests.scheduler.admin_script", *args],
        cwd=ROOT,
        env={**os.environ, **db.env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def start_scheduler(
    db: PgDatabase, broker: str, *extra: str, env: dict[str, str] | None = None
) -> Proc:
    proc = Proc(
        [*MANAGE, "emq_scheduler", "--broker", broker, *extra],
        env={
            **db.env,
            "EMQ_HEARTBEAT_INTERVAL": "0.5",
            "EMQ_HEARTBEAT_TIMEOUT": "3",
            **(env or {}),
        },
    )
    proc.wait_output(r"scheduler ready: broker=" + broker)
    return proc


@pytest.fixture
def clean_db(pg_database: PgDatabase) -> Iterator[PgDatabase]:
    pg_database.query("DELETE FROM django_eventmq_schedulerun")
    pg_database.query("DELETE FROM django_eventmq_schedule")
    yield pg_database


def serve(router: FakeRouter) -> None:
    """One turn of the fake router: read, ACK new schedulers, keep them alive."""
    router.pump(20)
    router.ack_informs()
    router.heartbeat_all()


def test_two_schedulers_on_postgres_never_fire_a_run_twice(
    clean_db: PgDatabase, router: FakeRouter
) -> None:
    rows = [
        {"path": "tests.scheduler.jobs", "callable": "touch", "args": [f"s{n}"], "interval": 1}
        for n in range(8)
    ]
    admin_script(clean_db, "create", json.dumps(rows))
    procs = [start_scheduler(clean_db, router.addr) for _ in range(2)]
    try:
        wait_for(lambda: (serve(router), len(router.peers) == 2)[1], 10, "both schedulers")

        def enough() -> bool:
            serve(router)
            per_schedule = Counter(m.body_text for _, m in router.of(Request))
            return len(per_schedule) == 8 and min(per_schedule.values()) >= 3

        wait_for(enough, 20, "three runs of each schedule")
    finally:
        for proc in procs:
            proc.stop()
    router.pump(50)
    requests = [m for _, m in router.of(Request)]
    senders = {identity for identity, m in router.received if isinstance(m, Request)}
    runs = clean_db.query("SELECT schedule_id, fire_time, msgid FROM django_eventmq_schedulerun")
    # Every run sent was claimed once, and no run was sent twice.
    assert sorted(m.msgid for m in requests) == sorted(r[2] for r in runs)
    assert len({m.msgid for m in requests}) == len(requests)
    assert len({(r[0], r[1]) for r in runs}) == len(runs)
    # And the fire times of each schedule are one interval apart: no slot fired twice.
    by_schedule: dict[int, list] = {}
    for schedule_id, fire_time, _ in runs:
        by_schedule.setdefault(schedule_id, []).append(fire_time)
    for times in by_schedule.values():
        times.sort()
        assert all((b - a).total_seconds() >= 1 for a, b in itertools.pairwise(times))
    assert len(senders) >= 1


def test_admin_edit_reaches_a_running_scheduler_within_2s(
    clean_db: PgDatabase, router: FakeRouter
) -> None:
    out = admin_script(
        clean_db, "add", json.dumps({"interval": 3600, "args": ["edit-me"], "nohaste": False})
    )
    schedule_id = out.strip().removeprefix("id=")
    proc = start_scheduler(clean_db, router.addr)  # default poll interval: 1 s
    try:
        wait_for(lambda: (serve(router), len(router.of(Request)) == 1)[1], 10, "the first run")
        editor = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.scheduler.admin_script",
                "edit",
                schedule_id,
                json.dumps({"interval": 1}),
            ],
            cwd=ROOT,
            env={**os.environ, **clean_db.env},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert editor.stdout is not None and editor.stdin is not None
            assert editor.stdout.readline().strip() == "ready"
            editor.stdin.write("go\n")
            editor.stdin.flush()
            edited_at = time.monotonic()
            # The effect: a 1-second interval counted from the last run is due now.
            wait_for(lambda: (serve(router), len(router.of(Request)) >= 2)[1], 2.0, "the edit")
            assert time.monotonic() - edited_at <= 2.0
            assert editor.wait(30) == 0
        finally:
            editor.kill()
            editor.wait()
    finally:
        proc.stop()


def _have_router_and_jobmanager() -> bool:
    base = ROOT / "django_eventmq"
    return all(
        (base / p).exists()
        for p in (
            "core/router.py",
            "core/jobmanager.py",
            "management/commands/emq_router.py",
            "management/commands/emq_jobmanager.py",
        )
    )


@pytest.mark.skipif(not _have_router_and_jobmanager(), reason="router/job manager not there yet")
def test_end_to_end_code_and_admin_schedules_run_jobs(
    clean_db: PgDatabase, tmp_path: Path, eventmq_settings
) -> None:
    frontend, backend, admin = (f"tcp://127.0.0.1:{free_port()}" for _ in range(3))
    env = {**clean_db.env, "EMQ_HEARTBEAT_INTERVAL": "0.5", "EMQ_HEARTBEAT_TIMEOUT": "3"}
    router = Proc(
        [*MANAGE, "emq_router", "--frontend", frontend, "--backend", backend, "--admin", admin],
        env=env,
    )
    procs = [router]
    try:
        manager = Proc(
            [
                *MANAGE,
                "emq_jobmanager",
                "--broker",
                backend,
                "--concurrency",
                "1",
                "--job-module",
                "tests.scheduler.jobs",
            ],
            env=env,
        )
        procs.append(manager)
        procs.append(start_scheduler(clean_db, frontend))
        from django_eventmq.core.schedule_api import schedule

        from . import jobs

        eventmq_settings(BROKER_ADDR=frontend)
        from_code = tmp_path / "from-code.txt"
        from_admin = tmp_path / "from-admin.txt"
        schedule(jobs.touch, interval_secs=3600, args=[str(from_code)])
        admin_script(clean_db, "add", json.dumps({"interval": 3600, "args": [str(from_admin)]}))
        wait_for(lambda: from_code.exists() and from_admin.exists(), 30, "both jobs to run")
        sources = {r[0] for r in clean_db.query("SELECT source FROM django_eventmq_schedule")}
        assert sources == {"api", "admin"}
    finally:
        for proc in reversed(procs):
            proc.stop()
