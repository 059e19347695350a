"""A real router process killed with SIGKILL and restarted on the same journal:
SCHEDULEs acknowledged before any scheduler came are handed to the first one
that connects, and a finished job's msgid is still refused after the restart.
Also ``manage.py emq_status --monitor`` against a real router.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from django_eventmq.runtime.settings import Settings
from django_eventmq.scheduling.scheduler import Scheduler
from tests.router.test_router import Peer
from tests.scheduling.fakes import MemoryStore
from tests.support import ROOT, Proc, tcp_addr, wait_for
from tests.system.chaos.support import admin_call, start_router

JOB_X = (
    '["run", {"callable": "touch", "path": "tests.scheduling.jobs", "args": ["x"], "kwargs": {}}]'
)
JOB_Y = (
    '["run", {"callable": "touch", "path": "tests.scheduling.jobs", "args": ["y"], "kwargs": {}}]'
)
JOB = '["run", {"callable": "hello", "path": "vjobs", "args": [1], "kwargs": {}}]'


class RouterProcess:
    """``python -m django_eventmq router`` on fixed addresses and one journal file."""

    def __init__(self, tmp_path: Path, **env: str) -> None:
        self.frontend, self.backend, self.admin = tcp_addr(), tcp_addr(), tcp_addr()
        self.journal = tmp_path / "journal.sqlite3"
        self.env = env
        self.procs: list[Proc] = []
        self.proc = self.start()

    def start(self) -> Proc:
        proc = start_router(self.frontend, self.backend, self.admin, self.journal, **self.env)
        self.procs.append(proc)
        return proc

    def crash_and_restart(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.popen.wait(10)
        self.proc.stop()
        self.proc = self.start()

    def monitor(self) -> dict[str, Any]:
        return admin_call(self.admin, "MONITOR")

    def stop(self) -> None:
        for proc in self.procs:
            proc.stop()


@pytest.fixture
def zctx() -> Iterator[zmq.Context[Any]]:
    ctx: zmq.Context[Any] = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


@pytest.fixture
def router(tmp_path: Path) -> Iterator[Callable[..., RouterProcess]]:
    made: list[RouterProcess] = []

    def start(**env: str) -> RouterProcess:
        made.append(RouterProcess(tmp_path, **env))
        return made[-1]

    yield start
    for proc in made:
        proc.stop()


def worker(zctx: zmq.Context[Any], backend: str, name: str, queues: str = "") -> Peer:
    """A job manager of ours (it reports with DONE), with one free slot."""
    peer = Peer(zctx, backend, name.encode())
    inform = peer.send("INFORM", queues, "worker")
    assert peer.expect("ACK", timeout=20)[2] == inform
    peer.expect("FEATURES", timeout=20)
    peer.send("FEATURES", '{"done":1}')
    peer.send("READY")
    return peer


def finish_one_and_queue_another(
    r: RouterProcess, zctx: zmq.Context[Any], client: Peer
) -> tuple[str, str]:
    """A guaranteed job on ``default`` run to its DONE by a job manager that then
    leaves, and one acknowledged on ``other`` that waits: their msgids."""
    first = client.send("REQUEST", "default", "guarantee", JOB)
    assert client.expect("ACK", timeout=20)[2] == first
    w = worker(zctx, r.backend, "w1")
    assert w.expect("REQUEST", timeout=20)[1] == first
    w.send("DONE", first, "ok", '{"value": 1}')
    wait_for(lambda: r.monitor()["in_flight"] == 0, 20, "the DONE")
    # An ACK is sent only after a commit, which holds every change before it:
    # once this one arrives, the finished msgid is on disk.
    second = client.send("REQUEST", "other", "guarantee", JOB)
    assert client.expect("ACK", timeout=20)[2] == second
    w.close()
    return first, second


def test_a_schedule_acked_before_any_scheduler_survives_a_router_crash(
    router: Callable[..., RouterProcess], zctx: zmq.Context[Any]
) -> None:
    r = router()
    client = Peer(zctx, r.frontend, b"scheduling-client")
    kept = client.send("SCHEDULE", "default", "", "60", JOB_X, "")
    gone = client.send("SCHEDULE", "default", "", "60", JOB_Y, "")
    # The reference's UNSCHEDULE form; it names JOB_Y, so that kept SCHEDULE goes.
    unschedule = client.send("UNSCHEDULE", "default", "", "-1", JOB_Y, "")
    acked = {client.expect("ACK", timeout=20)[2] for _ in range(3)}
    assert acked == {kept, gone, unschedule}
    assert admin_call(r.admin, "ROUTER_SHOW_SCHEDULERS")["buffered_schedule_messages"] == 2

    r.crash_and_restart()
    assert "2 SCHEDULE/UNSCHEDULE message(s) wait for a scheduler" in r.proc.output()
    assert r.monitor()["schedules_kept"] == 2

    # Our scheduler, with its store in memory, connects to the restarted router.
    store = MemoryStore()
    scheduler = Scheduler(
        Settings(broker_addr=r.frontend, heartbeat_interval=0.5, heartbeat_timeout=20),
        store,
        poll_interval=0.05,
    )
    try:

        def stored() -> bool:
            scheduler.loop_once(timeout=0.05)
            return bool(store.rows)

        wait_for(stored, 30, "the kept SCHEDULE to reach the scheduler's store")
        wait_for(
            lambda: (
                scheduler.loop_once(timeout=0.05),
                r.monitor()["schedules_kept"] == 0,
            )[1],
            30,
            "the journal to let go of the delivered messages",
        )
    finally:
        scheduler.close()
    (row,) = store.rows.values()
    assert json.loads(row.body_text)[1]["args"] == ["x"]  # JOB_X; JOB_Y was unscheduled
    assert row.timing.interval == 60

    # Delivered means gone from the journal: another crash hands out nothing twice.
    r.crash_and_restart()
    assert r.monitor()["schedules_kept"] == 0


def test_a_finished_jobs_msgid_is_still_refused_after_a_router_crash(
    router: Callable[..., RouterProcess], zctx: zmq.Context[Any]
) -> None:
    r = router()
    client = Peer(zctx, r.frontend, b"resending-client")
    first, _second = finish_one_and_queue_another(r, zctx, client)

    r.crash_and_restart()
    assert re.search(r"1 recently finished msgid\(s\) will not run again", r.proc.output())
    client.send("REQUEST", "default", "guarantee", JOB, msgid=first)
    assert client.expect("ACK", timeout=20)[2] == first  # acknowledged ...
    info = r.monitor()
    assert info["duplicates"] == 1  # ... as the job it already ran
    assert info["per_queue"].get("default", {}).get("queued", 0) == 0
    assert info["queued"] == 1  # only the other queue's job waits
    assert info["finished_remembered"] == 1


def test_a_finished_msgid_past_the_window_runs_again_after_a_crash(
    router: Callable[..., RouterProcess], zctx: zmq.Context[Any]
) -> None:
    """The window is bounded: with DEDUP_WINDOW=0 nothing is remembered."""
    r = router(EMQ_DEDUP_WINDOW="0")
    client = Peer(zctx, r.frontend, b"resending-client")
    first, _second = finish_one_and_queue_another(r, zctx, client)

    r.crash_and_restart()
    client.send("REQUEST", "default", "guarantee", JOB, msgid=first)
    assert client.expect("ACK", timeout=20)[2] == first
    info = r.monitor()
    assert info["duplicates"] == 0 and info["finished_remembered"] == 0
    assert info["per_queue"]["default"]["queued"] == 1


def test_sigterm_stops_the_router_with_exit_0_and_its_journal_intact(
    router: Callable[..., RouterProcess], zctx: zmq.Context[Any]
) -> None:
    """The graceful stop: a finished job and a waiting one are both still known
    after a SIGTERM and a restart, and the run ends with its "router stopped" line."""
    r = router()
    finish_one_and_queue_another(r, zctx, Peer(zctx, r.frontend, b"stopping-client"))

    assert r.proc.stop() == 0, r.proc.output()
    output = r.proc.output()
    assert "Traceback" not in output, output
    assert output.splitlines()[-1].endswith("router stopped"), output

    r.proc = r.start()
    assert re.search(r"1 recently finished msgid\(s\) will not run again", r.proc.output())
    info = r.monitor()
    assert (info["finished_remembered"], info["queued"]) == (1, 1)
    assert info["per_queue"]["other"]["queued"] == 1


def test_manage_py_emq_status_monitor_shows_the_journal_per_queue(
    router: Callable[..., RouterProcess], zctx: zmq.Context[Any]
) -> None:
    # A one-second lease, and one lost run sets a job aside.
    r = router(EMQ_JOB_LEASE="1", EMQ_POISON_AFTER="1", EMQ_HEARTBEAT_TIMEOUT="60")
    client = Peer(zctx, r.frontend, b"monitor-client")
    lost = client.send("REQUEST", "email", "", JOB)
    assert client.expect("ACK", timeout=20)[2] == lost
    w = worker(zctx, r.backend, "silent", queues="email")
    assert w.expect("REQUEST", timeout=20)[1] == lost  # taken, never reported
    wait_for(lambda: r.monitor()["poisoned"] == 1, 30, "the lease to run out")
    assert client.expect("REJECT", timeout=20)[2] == lost  # set aside: the client is told
    waiting = client.send("REQUEST", "default", "", JOB)
    assert client.expect("ACK", timeout=20)[2] == waiting

    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(
        [sys.executable, "manage.py", "emq_status", "--admin", r.admin, "--monitor"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    section = done.stdout.split("monitor:\n", 1)[1]
    fields = dict(line.split(": ", 1) for line in section.splitlines() if ": " in line)
    assert int(fields["store_bytes"]) > 0
    assert int(fields["syncs"]) >= 2
    assert (fields["expired"], fields["poisoned"], fields["queued"]) == ("1", "1", "1")
    queues = {
        m.group(1): dict(kv.split("=") for kv in m.group(2).split())
        for m in re.finditer(r"^queue (\S+): (.*)$", section, re.M)
    }
    assert queues["email"]["expired"] == "1" and queues["email"]["poisoned"] == "1"
    assert queues["email"]["queued"] == "0"
    assert queues["default"]["queued"] == "1" and queues["default"]["expired"] == "0"
