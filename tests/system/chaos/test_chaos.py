"""Chaos: thousands of ``guarantee`` jobs while the router, the job managers and their
worker processes are killed with SIGKILL at random moments and restarted.

The producer is our client's guaranteed bulk send (``Client.send_many``: a
window of REQUESTs each resent with its msgid until the router ACKs it, which
it does once the job is in its journal), paced by the workers so that sends,
resends and kills overlap. Each kill waits until a random share of the jobs
has run and records how many had not: the test asserts the kills landed
while jobs were pending. Every job appends its msgid to a file when it runs;
the test asserts that every job ran at least once and prints how many ran
more than once.

Bounded form (CI): 2,000 jobs, 8 kills. Longer form by hand:
``EMQ_CHAOS_JOBS=20000 EMQ_CHAOS_KILLS=40 pytest tests/system/chaos/test_chaos.py -s``.
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

from django_eventmq.client.connection import Client
from tests.support import Proc, tcp_addr, wait_for
from tests.system.chaos.jobs import RECORD_ENV
from tests.system.chaos.support import (
    admin_call,
    body,
    children,
    descendants,
    kill_if_same,
    recorded,
    start_jobmanager,
    start_router,
    wait_recorded,
)

JOBS = int(os.environ.get("EMQ_CHAOS_JOBS", "2000"))
KILLS = int(os.environ.get("EMQ_CHAOS_KILLS", "8"))
SEED = int(os.environ.get("EMQ_CHAOS_SEED", str(random.randrange(1_000_000))))
#: REQUESTs per guaranteed bulk send; the producer keeps about two batches ahead.
BATCH = 200

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

    def kill(self, rng: random.Random) -> str | None:
        """SIGKILL one random part and restart it; returns what was killed (None: nothing)."""
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
                return None  # no worker process yet
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
    ran_file = tmp_path / "ran.txt"
    done = threading.Event()
    #: (what was killed, jobs not yet run at that moment)
    kills: list[tuple[str, int]] = []

    def unfinished() -> int:
        return JOBS - len(set(recorded(ran_file)))

    def chaos() -> None:
        # Random moments along the run: each kill waits until a random share
        # of the jobs has run, so it lands while others are still to run.
        for share in sorted(rng.uniform(0.02, 0.9) for _ in range(KILLS)):
            while JOBS - unfinished() < share * JOBS:
                if done.wait(0.05):
                    return
            backlog = unfinished()
            victim = cluster.kill(rng)
            if victim is not None:
                kills.append((victim, backlog))

    killer = threading.Thread(target=chaos, name="chaos")
    killer.start()
    client = Client(cluster.frontend)
    resent = 0
    try:
        # Our client's guaranteed bulk send, in batches paced by the workers,
        # so REQUESTs are still being sent (and resent) while parts are killed.
        for start in range(0, JOBS, BATCH):
            wait_for(
                lambda start=start: unfinished() - (JOBS - start) < 2 * BATCH,
                120,
                "the job managers to catch up with the producer",
                poll=0.05,
            )
            batch = msgids[start : start + BATCH]
            result = client.send_many(
                ((m.encode(), b"default", b"guarantee", body(m, work=0.002)) for m in batch),
                window=BATCH,
                ack_timeout=3.0,
            )
            assert result.acked == len(batch), result.rejected
            resent += result.resent
        lines = wait_recorded(ran_file, set(msgids), timeout=60)
        killer.join()
    except BaseException:
        print(f"chaos seed {SEED}, kills so far: {kills}\n{cluster.outputs()}")
        raise
    finally:
        client.close()
        done.set()
        killer.join()

    counts = Counter(lines)
    twice = sum(1 for m in msgids if counts[m] > 1)
    print(
        f"\nchaos seed {SEED}: {JOBS} jobs, kills {dict(cluster.kills)}; jobs not yet run at "
        f"each kill {[backlog for _, backlog in kills]}; {resent} REQUEST(s) resent; "
        f"{twice} job(s) ran more than once ({len(lines) - JOBS} extra runs)"
    )
    assert set(msgids) <= set(counts)
    assert admin_call(cluster.admin, "MONITOR")["poisoned"] == 0
    # The kills landed while jobs were waiting or running, not after the work was done.
    assert len(kills) >= KILLS * 3 // 4, kills
    assert sum(1 for _, backlog in kills if backlog > 0) >= len(kills) * 3 // 4, kills
