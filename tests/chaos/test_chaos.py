"""Chaos: thousands of ``guarantee`` jobs while the router, the job managers and their
worker processes are killed with SIGKILL at random moments and restarted.

Every job appends its msgid to a file when it runs. The test asserts that every
job ran at least once and prints how many ran more than once.

Bounded form (CI): 2,000 jobs, 8 kills. Longer form by hand:
``EMQ_CHAOS_JOBS=20000 EMQ_CHAOS_KILLS=40 pytest tests/chaos/test_chaos.py -s``.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.jobs import RECORD_ENV
from tests.chaos.support import (
    Producer,
    admin_call,
    body,
    children,
    descendants,
    kill_if_same,
    start_jobmanager,
    start_router,
    wait_recorded,
)
from tests.support import Proc, tcp_addr

JOBS = int(os.environ.get("EMQ_CHAOS_JOBS", "2000"))
KILLS = int(os.environ.get("EMQ_CHAOS_KILLS", "8"))
SEED = int(os.environ.get("EMQ_CHAOS_SEED", str(random.randrange(1_000_000))))

#: Fast failure detection, so a killed router is noticed in seconds; a job's
#: worker dying is not its fault here, so nothing is set aside as poisoned.
ENV = {
    "EMQ_HEARTBEAT_INTERVAL": "0.5",
    "EMQ_HEARTBEAT_TIMEOUT": "2",
    "EMQ_RECONNECT_MAX_DELAY": "1",
    "EMQ_POISON_AFTER": "1000",
}


class Cluster:
    """One router and two job managers, restartable on the same addresses and journal."""

    def __init__(self, workdir: Path) -> None:
        self.frontend, self.backend, self.admin = tcp_addr(), tcp_addr(), tcp_addr()
        self.journal = workdir / "journal.sqlite3"
        self.env = {**ENV, RECORD_ENV: str(workdir / "ran.txt")}
        self.router = self._router()
        self.jobmanagers = [self._jobmanager(), self._jobmanager()]
        #: Worker processes of killed job managers (pid, start time), to clean up orphans.
        self.everything: list[tuple[int, str]] = []
        self.kills: Counter[str] = Counter()
        self.killed: list[tuple[str, Proc]] = []

    def _router(self) -> Proc:
        return start_router(self.frontend, self.backend, self.admin, self.journal, **self.env)

    def _jobmanager(self) -> Proc:
        return start_jobmanager(self.backend, concurrency=2, **self.env)

    def kill(self, rng: random.Random) -> str:
        """SIGKILL one random part and restart it; returns what was killed."""
        victim = rng.choice(["router", "jobmanager", "child", "child"])
        if victim == "router":
            os.kill(self.router.pid, signal.SIGKILL)
            self.router.popen.wait(10)
            self.router.stop()
            self.killed.append(("killed router", self.router))
            self.router = self._router()
        elif victim == "jobmanager":
            index = rng.randrange(len(self.jobmanagers))
            doomed = self.jobmanagers[index]
            self.everything.extend(descendants(doomed.pid))
            os.kill(doomed.pid, signal.SIGKILL)
            doomed.popen.wait(10)
            doomed.stop()
            self.killed.append(("killed jobmanager", doomed))
            self.jobmanagers[index] = self._jobmanager()
        else:
            kids = [pid for jm in self.jobmanagers for pid in children(jm.pid)]
            if not kids:
                return "nothing (no worker process yet)"
            with contextlib.suppress(ProcessLookupError):
                os.kill(rng.choice(kids), signal.SIGKILL)
        self.kills[victim] += 1
        return victim

    def outputs(self) -> str:
        parts = [
            *self.killed,
            ("router", self.router),
            *(("jobmanager", jm) for jm in self.jobmanagers),
        ]
        return "\n".join(f"--- {name}:\n{proc.output()[-4000:]}" for name, proc in parts)

    def stop(self) -> None:
        for jm in self.jobmanagers:
            self.everything.extend(descendants(jm.pid))
            jm.stop()
        self.router.stop()
        for pid, started in self.everything:
            kill_if_same(pid, started)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(tmp_path)
    try:
        yield made
    finally:
        made.stop()


def test_every_guaranteed_job_runs_at_least_once_through_sigkills(
    cluster: Cluster, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    msgids = [f"chaos-{SEED}-{i}" for i in range(JOBS)]
    done = threading.Event()
    log: list[str] = []

    def chaos() -> None:
        for _ in range(KILLS):
            # Pacing between kills (not waiting for anything): random moments.
            if done.wait(rng.uniform(0.3, 1.5)):
                return
            log.append(cluster.kill(rng))

    killer = threading.Thread(target=chaos, name="chaos")
    killer.start()
    producer = Producer(cluster.frontend)
    try:
        producer.run(((m, body(m, work=0.002)) for m in msgids), ack_timeout=3.0)
        killer.join()
        lines = wait_recorded(tmp_path / "ran.txt", set(msgids), timeout=60)
    except BaseException:
        print(f"chaos seed {SEED}, kills so far: {log}\n{cluster.outputs()}")
        raise
    finally:
        producer.close()
        done.set()
        killer.join()

    counts = Counter(lines)
    twice = sum(1 for m in msgids if counts[m] > 1)
    print(
        f"\nchaos seed {SEED}: {JOBS} jobs, kills {dict(cluster.kills)} ({log}); "
        f"{producer.resent} REQUEST(s) resent; {twice} job(s) ran more than once "
        f"({len(lines) - JOBS} extra runs)"
    )
    assert set(msgids) <= set(counts)
    assert admin_call(cluster.admin, "MONITOR")["poisoned"] == 0
