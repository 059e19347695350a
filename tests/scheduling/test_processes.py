"""Real processes on PostgreSQL: two schedulers side by side, admin edits, end to end.

Each test starts ``manage.py emq_scheduler`` processes on a throwaway
database; the fake router (a ROUTER socket in the test) or the real router
and job manager stand on the other side. End to end: schedules made with
``schedule()``, in the admin and with ``@job(schedule=...)`` run jobs, and
``unschedule()`` over the wire removes rows and stops the runs.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from django_eventmq.cli import admin_client
from django_eventmq.protocol import Heartbeat, Inform, Kbai, Request
from django_eventmq.scheduling.api import schedule, unschedule
from tests.fake_router import FakeRouter
from tests.support import ROOT, Proc, free_port, wait_for

from . import jobs
from .conftest import PgDatabase

pytestmark = pytest.mark.postgres
MANAGE = [sys.executable, str(ROOT / "manage.py")]
#: Where tests.scheduling.declared_jobs leaves its trace (not imported here: it declares schedules).
TRACE_DIR_ENV = "EMQ_TEST_TRACE_DIR"


def admin_script(db: PgDatabase, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tests.scheduling.admin_script", *args],
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
    router.pump(0.02)
    router.ack_informs()
    router.heartbeat_all()


def test_two_schedulers_on_postgres_never_fire_a_run_twice(
    clean_db: PgDatabase, router: FakeRouter
) -> None:
    # Many schedules due at the same moments, so the two compete in every round.
    count = 30
    rows = [
        {"path": "tests.scheduling.jobs", "callable": "touch", "args": [f"s{n}"], "interval": 1}
        for n in range(count)
    ]
    admin_script(clean_db, "create", json.dumps(rows))
    procs = [start_scheduler(clean_db, router.addr) for _ in range(2)]
    try:
        # Neither fires before the router ACKs its INFORM: both wait for this.
        wait_for(lambda: (serve(router), len(router.peers) == 2)[1], 10, "both schedulers")

        def enough() -> bool:
            serve(router)
            per_schedule = Counter(m.body_text for _, m in router.of(Request))
            return len(per_schedule) == count and min(per_schedule.values()) >= 3

        wait_for(enough, 60, "three runs of each schedule")
    finally:
        for proc in procs:
            proc.stop()
    router.pump(0.05)
    requests = [(identity.decode(), m) for identity, m in router.of(Request)]
    runs = clean_db.query(
        "SELECT schedule_id, fire_time, msgid, claimed_by FROM django_eventmq_schedulerun"
    )
    claimed_by = {msgid: who for _, _, msgid, who in runs}
    # Every run sent was claimed once, by the scheduler that sent it, and none was sent twice.
    assert sorted(m.msgid for _, m in requests) == sorted(claimed_by)
    assert len({m.msgid for _, m in requests}) == len(requests)
    assert all(claimed_by[m.msgid] == sender for sender, m in requests)
    assert len({(r[0], r[1]) for r in runs}) == len(runs)
    # Both schedulers were live and competing: each won some of the claims.
    per_scheduler = Counter(claimed_by.values())
    assert len(per_scheduler) == 2, per_scheduler
    assert set(per_scheduler) == {identity.decode() for identity, _ in router.of(Inform)}
    # And the fire times of each schedule are one interval apart: no slot fired twice.
    by_schedule: dict[int, list] = {}
    for schedule_id, fire_time, _, _ in runs:
        by_schedule.setdefault(schedule_id, []).append(fire_time)
    for times in by_schedule.values():
        times.sort()
        assert all((b - a).total_seconds() >= 1 for a, b in itertools.pairwise(times))


def test_admin_edit_reaches_a_running_scheduler_without_a_restart(
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
                "tests.scheduling.admin_script",
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
            # The effect: a 1-second interval counted from the last run is due now. It
            # shows at the scheduler's next reload (every 1 s by default; the reload on
            # its own: test_scheduler_core.py, test_edit_in_store_is_picked_up_without_
            # restart). The deadline bounds a loaded machine; no wall-clock assertion.
            wait_for(lambda: (serve(router), len(router.of(Request)) >= 2)[1], 30.0, "the edit")
            assert editor.wait(30) == 0
        finally:
            editor.kill()
            editor.wait()
    finally:
        proc.stop()


class Stack:
    """A real router and job manager on the test's database; ``frontend`` is for clients."""

    def __init__(
        self, db: PgDatabase, trace_dir: Path, heartbeat: tuple[float, float] = (0.5, 3)
    ) -> None:
        self.db = db
        frontend, backend, admin = (f"tcp://127.0.0.1:{free_port()}" for _ in range(3))
        self.frontend = frontend
        self.admin = admin
        self.env = {
            **db.env,
            "EMQ_HEARTBEAT_INTERVAL": str(heartbeat[0]),
            "EMQ_HEARTBEAT_TIMEOUT": str(heartbeat[1]),
            TRACE_DIR_ENV: str(trace_dir),
        }
        self.procs: list[Proc] = []
        self._router_args = ("--frontend", frontend, "--backend", backend, "--admin", admin)
        self.router = self.start_router()
        manager = self._start(
            "emq_jobmanager",
            "--broker",
            backend,
            "--concurrency",
            "1",
            "--job-module",
            "tests.scheduling.jobs",
            "--job-module",
            "tests.scheduling.declared_jobs",
        )
        manager.wait_output(r"jobmanager ready: ", timeout=60)

    def start_router(self) -> Proc:
        """The router on the stack's addresses (again, after :meth:`stop_router`)."""
        router = self._start("emq_router", *self._router_args)
        router.wait_output(r"router ready: ", timeout=60)
        return router

    def stop_router(self) -> str:
        """Stop the router; its output."""
        self.router.stop()
        self.procs.remove(self.router)
        return self.router.output()

    def schedulers(self) -> dict[str, Any]:
        """The router's ROUTER_SHOW_SCHEDULERS ``connected_schedulers``."""
        answer = admin_client.ask(self.admin, "ROUTER_SHOW_SCHEDULERS")
        return answer["connected_schedulers"]  # type: ignore[no-any-return]

    def _start(self, *args: str) -> Proc:
        proc = Proc([*MANAGE, *args], env=self.env)
        self.procs.append(proc)
        return proc

    def scheduler(self, env: dict[str, str] | None = None) -> Proc:
        proc = start_scheduler(self.db, self.frontend, env={**self.env, **(env or {})})
        self.procs.append(proc)
        return proc

    def schedules(self) -> list[tuple[Any, ...]]:
        return self.db.query(
            "SELECT id, source, path, callable, args, interval, cron, timezone, nohaste "
            "FROM django_eventmq_schedule ORDER BY id"
        )

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()


def _serving(running: Stack, eventmq_settings: Any) -> Iterator[Stack]:
    """``running``, with this process's client pointed at its router; stopped afterwards."""
    from django_eventmq.client import connection

    try:
        eventmq_settings(BROKER_ADDR=running.frontend)
        yield running
    finally:
        connection.close_clients()
        running.stop()


@pytest.fixture
def stack(clean_db: PgDatabase, tmp_path: Path, eventmq_settings: Any) -> Iterator[Stack]:
    """Router and job manager running; this process's client points at the router."""
    yield from _serving(Stack(clean_db, tmp_path), eventmq_settings)


#: (HEARTBEAT_INTERVAL, HEARTBEAT_TIMEOUT) of :func:`busy_stack`: a schedule firing
#: every second fires more often than the interval.
BUSY_HEARTBEAT = (1.5, 2.5)


@pytest.fixture
def busy_stack(clean_db: PgDatabase, tmp_path: Path, eventmq_settings: Any) -> Iterator[Stack]:
    """:func:`stack` with heartbeats slower than a 1-second schedule (:data:`BUSY_HEARTBEAT`)."""
    yield from _serving(Stack(clean_db, tmp_path, BUSY_HEARTBEAT), eventmq_settings)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_end_to_end_code_and_admin_schedules_run_jobs(
    stack: Stack, clean_db: PgDatabase, tmp_path: Path
) -> None:
    stack.scheduler()
    from_code = tmp_path / "from-code.txt"
    from_admin = tmp_path / "from-admin.txt"
    schedule(jobs.touch, interval_secs=3600, args=[str(from_code)])
    admin_script(clean_db, "add", json.dumps({"interval": 3600, "args": [str(from_admin)]}))
    wait_for(lambda: from_code.exists() and from_admin.exists(), 30, "both jobs to run")
    sources = {r[0] for r in clean_db.query("SELECT source FROM django_eventmq_schedule")}
    assert sources == {"api", "admin"}


def test_schedules_declared_on_job_are_synced_at_start_up_and_run(
    stack: Stack, clean_db: PgDatabase, tmp_path: Path
) -> None:
    # A row from code that the code no longer declares: the sync removes it.
    admin_script(
        clean_db,
        "create",
        json.dumps(
            [
                {
                    "path": "tests.scheduling.declared_jobs",
                    "callable": "declared_touch",
                    "args": ["gone-from-code"],
                    "interval": 60,
                    "source": "code",
                }
            ]
        ),
    )
    assert len(stack.schedules()) == 1
    # The scheduler imports the module (JOB_MODULES) and so sees @job(schedule=...).
    declared = {"EMQ_JOB_MODULES": "tests.scheduling.declared_jobs"}
    first = stack.scheduler(env=declared)
    assert "schedules from code: 2 in the table, 1 removed" in first.output()
    rows = stack.schedules()
    found = {(r[1], r[2], r[3], tuple(r[4]), r[5], r[6], r[7], r[8]) for r in rows}
    assert found == {
        (
            "code",
            "tests.scheduling.declared_jobs",
            "declared_touch",
            ("every-second",),
            1,
            "",
            "UTC",
            False,
        ),
        (
            "code",
            "tests.scheduling.declared_jobs",
            "declared_touch",
            ("nightly",),
            None,
            "0 3 * * *",
            "Europe/Berlin",
            True,
        ),
    }
    # The every-second one runs on the job manager, again and again; the nightly one waits.
    wait_for(lambda: len(lines(tmp_path / "every-second")) >= 2, 30, "two declared runs")
    assert not (tmp_path / "nightly").exists()
    (next_nightly,) = clean_db.query(
        "SELECT next_run FROM django_eventmq_schedule WHERE cron = '0 3 * * *'"
    )[0]
    berlin = next_nightly.astimezone(ZoneInfo("Europe/Berlin"))
    assert (berlin.hour, berlin.minute) == (3, 0)
    # A restart syncs again: the same rows, none added or removed.
    first.stop()
    second = stack.scheduler(env=declared)
    assert "schedules from code: 2 in the table, 0 removed" in second.output()
    assert [r[0] for r in stack.schedules()] == [r[0] for r in rows]


def test_unschedule_over_the_wire_removes_the_row_and_the_job_stops(
    stack: Stack, clean_db: PgDatabase, tmp_path: Path
) -> None:
    stack.scheduler()
    keeper, victim = tmp_path / "keeper", tmp_path / "victim"
    schedule(jobs.touch, interval_secs=1, args=[str(keeper)])
    schedule(jobs.touch, interval_secs=1, args=[str(victim)])
    schedule(jobs.touch, interval_secs=3600, nohaste=True, args=[str(victim)])

    def victim_rows() -> list[int | None]:
        return sorted(r[5] for r in stack.schedules() if r[4] == [str(victim)])

    wait_for(lambda: victim_rows() == [1, 3600], 30, "both schedules of the victim stored")
    wait_for(lambda: lines(victim) and lines(keeper), 30, "the first runs")
    # With a timing, only that schedule goes; the other one of the job keeps firing.
    unschedule(jobs.touch, args=[str(victim)], interval_secs=3600)
    wait_for(lambda: victim_rows() == [1], 30, "the hourly schedule removed")
    ran = len(lines(victim))
    wait_for(lambda: len(lines(victim)) > ran, 30, "the per-second schedule still running")
    # Without a timing, every schedule of the job with these arguments goes.
    unschedule(jobs.touch, args=[str(victim)])
    wait_for(lambda: victim_rows() == [], 30, "the victim's schedules removed")
    assert [r[4] for r in stack.schedules()] == [[str(keeper)]]
    # A run sent just before the UNSCHEDULE may still be on its way: let the keeper
    # (same queue, one worker) run once more, then count; three more keeper runs
    # (three seconds) later the victim has not run again.
    ticks = len(lines(keeper))
    wait_for(lambda: len(lines(keeper)) > ticks, 30, "the keeper to run again")
    ran, ticks = len(lines(victim)), len(lines(keeper))
    wait_for(lambda: len(lines(keeper)) >= ticks + 3, 30, "three more keeper runs")
    assert len(lines(victim)) == ran


def _keeps_firing_while_registered(stack: Stack, trace: Path, runs: int) -> None:
    """Wait for ``runs`` more runs in ``trace``, the scheduler registered at every look."""
    start = len(lines(trace))

    def fired_registered() -> bool:
        assert len(stack.schedulers()) == 1, "the router dropped the busy scheduler"
        return len(lines(trace)) >= start + runs

    wait_for(fired_registered, 60, f"{runs} more runs", poll=0.2)


def test_a_busy_scheduler_stays_registered_and_unschedule_still_reaches_it(
    busy_stack: Stack, tmp_path: Path
) -> None:
    """A 1-second schedule, heartbeats slower than that: over two heartbeat timeouts
    the scheduler stays registered (neither side drops, reconnects or INFORMs again),
    and an UNSCHEDULE still reaches it. (The router counting a known scheduler's
    REQUESTs as its heartbeat is in tests/router/test_router.py: ours also sends a
    HEARTBEAT every interval, however busy.)"""
    stack = busy_stack
    scheduler = stack.scheduler()
    trace = tmp_path / "busy"
    schedule(jobs.touch, interval_secs=1, args=[str(trace)])
    wait_for(lambda: lines(trace), 30, "the first run")
    # Two timeouts suffice: a side that stopped counting the other's messages
    # drops it (or reconnects) one timeout after the last it counted, so any
    # such moment in the first timeout falls due, and shows, within the second.
    _keeps_firing_while_registered(stack, trace, runs=int(2 * BUSY_HEARTBEAT[1]) + 1)
    unschedule(jobs.touch, args=[str(trace)])
    wait_for(lambda: stack.schedules() == [], 30, "the schedule removed by UNSCHEDULE")
    assert "dropped" not in stack.router.output()
    # Nor did it think itself forgotten.
    assert "reconnecting" not in scheduler.output()
    assert "INFORM again" not in scheduler.output()


#: A scheduler that would wait long for a silent router (its own HEARTBEAT_TIMEOUT):
#: it does not reconnect by itself while its router restarts or ignores it, so what
#: registers it again is the router taking it back on its HEARTBEAT.
PATIENT = {"EMQ_HEARTBEAT_TIMEOUT": "60"}


def test_a_busy_scheduler_a_restarted_router_forgot_registers_again(
    busy_stack: Stack, tmp_path: Path
) -> None:
    """The new router does not know the scheduler; its next HEARTBEAT (sent every
    interval, however busy it is) registers it again, and UNSCHEDULE reaches it."""
    stack = busy_stack
    scheduler = stack.scheduler(env=PATIENT)
    trace = tmp_path / "busy"
    schedule(jobs.touch, interval_secs=1, args=[str(trace)])
    wait_for(lambda: lines(trace), 30, "the first run")
    stack.stop_router()
    stack.router = stack.start_router()
    wait_for(lambda: len(stack.schedulers()) == 1, 30, "the scheduler registered again", poll=0.2)
    assert "registered again: a HEARTBEAT without INFORM" in stack.router.output()
    _keeps_firing_while_registered(stack, trace, runs=2)
    unschedule(jobs.touch, args=[str(trace)])
    wait_for(lambda: stack.schedules() == [], 30, "the schedule removed by UNSCHEDULE")
    assert scheduler.popen.poll() is None


def test_a_scheduler_the_router_dropped_registers_again(busy_stack: Stack, tmp_path: Path) -> None:
    """Stopped (SIGSTOP) past the timeout, it is dropped; once it runs again, its
    HEARTBEAT registers it again and an UNSCHEDULE reaches it."""
    stack = busy_stack
    scheduler = stack.scheduler(env=PATIENT)
    trace = tmp_path / "busy"
    schedule(jobs.touch, interval_secs=1, args=[str(trace)])
    wait_for(lambda: lines(trace), 30, "the first run")
    scheduler.signal(signal.SIGSTOP)
    try:
        stack.router.wait_output(r"scheduler \S+ dropped: silent for more than")
        assert stack.schedulers() == {}
    finally:
        scheduler.signal(signal.SIGCONT)
    wait_for(lambda: len(stack.schedulers()) == 1, 30, "the scheduler registered again", poll=0.2)
    assert "registered again: a HEARTBEAT without INFORM" in stack.router.output()
    unschedule(jobs.touch, args=[str(trace)])
    wait_for(lambda: stack.schedules() == [], 30, "the schedule removed by UNSCHEDULE")


def test_a_scheduler_with_no_router_logs_that_it_waits_for_it(clean_db: PgDatabase) -> None:
    addr = f"tcp://127.0.0.1:{free_port()}"  # nothing listens there
    short = {"EMQ_HEARTBEAT_INTERVAL": "0.2", "EMQ_HEARTBEAT_TIMEOUT": "0.5"}
    proc = start_scheduler(clean_db, addr, env=short)
    try:
        proc.wait_output(re.escape(f"scheduler waiting for the router at {addr}: no answer yet"))
    finally:
        proc.stop()


def test_sigterm_stops_the_scheduler_gracefully(clean_db: PgDatabase, router: FakeRouter) -> None:
    proc = start_scheduler(clean_db, router.addr)
    try:
        # It heartbeats only once it has our ACK: then it knows it is registered.
        wait_for(lambda: (serve(router), router.of(Heartbeat))[1], 10, "the scheduler registered")
        registered = list(router.peers)
        proc.signal(signal.SIGTERM)
        # Graceful: it says goodbye to the router that knows it, then exits 0.
        router.wait_for(Kbai, timeout=15, tick=router.heartbeat_all)
        try:
            code = proc.popen.wait(15)
        except subprocess.TimeoutExpired:
            raise AssertionError("the scheduler still ran 15s after SIGTERM") from None
        output = proc.output()
        assert code == 0, output
        assert "scheduler stopped" in output and "Traceback" not in output
        # Not router.peers now: a HEARTBEAT of the tick sent after it hung up, while
        # its KBAI still waited unread, took it out of there.
        assert [identity for identity, _ in router.of(Kbai)] == registered
    finally:
        proc.stop()
