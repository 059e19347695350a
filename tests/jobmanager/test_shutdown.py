"""SIGTERM on a job manager process: running jobs finish (within the grace), KBAI, exit 0.

With a router of ours, jobs that have not started are handed back with NACK instead.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

from django_eventmq.protocol import Done, Kbai, Nack, Ready
from tests.fake_router import SAMPLE, FakeRouter, body
from tests.support import Proc, wait_for


def start_jobmanager(router: FakeRouter, **options: Any) -> Proc:
    values: dict[str, Any] = {
        "worker_addr": router.addr,
        "concurrency": 1,
        "prefetch": 0,
        "job_modules": [SAMPLE],
    }
    values.update(options)
    return Proc([sys.executable, "-m", "tests.jobs_fixtures.jm_main", json.dumps(values)])


def test_sigterm_lets_running_job_finish_then_says_goodbye(
    router: FakeRouter, tmp_path: Path
) -> None:
    done = tmp_path / "done.txt"
    proc = start_jobmanager(router, shutdown_grace=10)
    try:
        identity, _ = router.handshake()
        router.expect(Ready)
        router.skip_seen()
        router.request(identity, body("slow", 0.5, str(done)))
        wait_for(lambda: done.exists(), 10, "job started")
        proc.signal(signal.SIGTERM)
        assert proc.popen.wait(20) == 0
        assert done.read_text().split()[::2] == ["start", "done"]
        router.expect(Kbai, timeout=5)
        router.pump(0.05)
        assert router.count(Ready) == 0  # no new work taken after SIGTERM
        assert "jobmanager stopped" in proc.output()
    finally:
        proc.stop()


def test_sigterm_terminates_jobs_that_outlive_the_grace(router: FakeRouter, tmp_path: Path) -> None:
    done = tmp_path / "done.txt"
    proc = start_jobmanager(router, shutdown_grace=0.3)
    try:
        identity, _ = router.handshake()
        router.expect(Ready)
        msgid = router.request(identity, body("slow", 30, str(done)))
        wait_for(lambda: done.exists(), 10, "job started")
        proc.signal(signal.SIGTERM)
        assert proc.popen.wait(20) == 0
        router.expect(Kbai, timeout=5)
        output = proc.output()
        assert "terminating jobs" in output and msgid in output
        assert done.read_text().split()[::2] == ["start"]
    finally:
        proc.stop()


def test_sigterm_when_idle_exits_promptly(router: FakeRouter) -> None:
    proc = start_jobmanager(router)
    try:
        router.handshake()
        router.expect(Ready)
        proc.signal(signal.SIGTERM)
        assert proc.popen.wait(20) == 0
        router.expect(Kbai, timeout=5)
    finally:
        proc.stop()


def test_sigterm_with_our_router_nacks_jobs_that_have_not_started(
    router: FakeRouter, tmp_path: Path
) -> None:
    started, never = tmp_path / "started.txt", tmp_path / "never.txt"
    proc = start_jobmanager(router, prefetch=2, prefetch_budget=0, shutdown_grace=10)
    try:
        identity, _ = router.handshake(features=True)
        router.wait_count(Ready, 3)
        first = router.request(identity, body("slow", 0.5, str(started)))
        queued = [router.request(identity, body("record", str(never), i)) for i in range(2)]
        wait_for(started.exists, 10, "the first job started")
        proc.signal(signal.SIGTERM)
        nacked = [router.expect(Nack, job_msgid=msgid)[1] for msgid in queued]
        assert {nack.reason for nack in nacked} == {"stopping"}
        assert router.expect(Done, job_msgid=first)[1].status == "ok"  # it finished
        router.expect(Kbai, timeout=5)
        assert proc.popen.wait(20) == 0
    finally:
        proc.stop()
    assert not never.exists()  # handed back, not run during the grace period
    assert started.read_text().split()[::2] == ["start", "done"]
