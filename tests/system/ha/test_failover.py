"""Failover between two routers that share a journal, seen from the peers.

Router A (frontend a1, backend a2) serves; a job manager is given
``WORKER_ADDR="a2,b2"`` and a client ``BROKER_ADDR``-style ``"a1,b1"``. A is
SIGKILLed while a long job runs and guaranteed jobs are being sent; router B
starts on b1/b2 with the same journal file (what a group's standby does when
it takes over, without PostgreSQL). Then: the job manager reaches B and its
running job runs once (it is named in the job manager's FEATURES answer, and
a REQUEST for it while it runs is not run twice), every guaranteed job runs
(none lost), and the jobs that ran twice are counted (at least once allows
them: a DONE that A had not stored yet, an ACK that did not come back).
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from django_eventmq.client.connection import Client
from tests.support import Proc, python_module, tcp_addr, wait_for
from tests.system.chaos.support import LOG_LEVEL, admin_call, start_router
from tests.system.ha.jobs import RECORD_ENV

JOB_PATH = "tests.system.ha.jobs"
JOBS = 1200
BATCH = 100
#: Seconds the long job works at most: it ends once the test says so (``Pair.release``),
#: after A died, B took over and every short job ended; this only bounds a failing run.
LONG = 60.0
ENV = {
    "EMQ_HEARTBEAT_INTERVAL": "0.5",
    "EMQ_HEARTBEAT_TIMEOUT": "2",
    "EMQ_RECONNECT_MAX_DELAY": "1",
    "EMQ_POISON_AFTER": "1000",
}


def body(token: str, work: float = 0.0, until: Path | None = None) -> bytes:
    args = [token, work] if until is None else [token, work, str(until)]
    return json.dumps(
        ["run", {"path": JOB_PATH, "callable": "record", "args": args, "kwargs": {}}]
    ).encode()


def lines(path: Path) -> list[tuple[str, str]]:
    if not path.exists():
        return []
    return [tuple(line.split(" ", 1)) for line in path.read_text().splitlines()]  # type: ignore[misc]


class Pair:
    """Router A now, router B after the kill; one job manager given both backends."""

    def __init__(self, workdir: Path) -> None:
        self.a1, self.a2, self.a_admin = tcp_addr(), tcp_addr(), tcp_addr()
        self.b1, self.b2, self.b_admin = tcp_addr(), tcp_addr(), tcp_addr()
        self.journal = workdir / "journal.sqlite3"
        self.record = workdir / "ran.txt"
        #: Created by the test when the long job may end.
        self.release = workdir / "release-the-long-job"
        self.env = {**ENV, RECORD_ENV: str(self.record)}
        self.router_a: Proc | None = None
        self.router_b: Proc | None = None
        self.jobmanager: Proc | None = None

    def start(self) -> None:
        self.router_a = start_router(self.a1, self.a2, self.a_admin, self.journal, **self.env)
        self.jobmanager = Proc(
            python_module(
                "jobmanager",
                "--concurrency",
                "3",
                "--job-module",
                JOB_PATH,
                "--log-level",
                LOG_LEVEL,
            ),
            env={**self.env, "EMQ_WORKER_ADDR": f"{self.a2},{self.b2}"},
        )

    def fail_over(self) -> None:
        assert self.router_a is not None
        os.kill(self.router_a.pid, signal.SIGKILL)
        self.router_a.popen.wait(10)
        self.router_b = start_router(self.b1, self.b2, self.b_admin, self.journal, **self.env)

    def outputs(self) -> str:
        named = (("router A", self.router_a), ("router B", self.router_b), ("jm", self.jobmanager))
        return "\n".join(f"--- {n}:\n{p.output()[-6000:]}" for n, p in named if p is not None)

    def stop(self) -> None:
        for proc in (self.jobmanager, self.router_b, self.router_a):
            if proc is not None:
                proc.stop()


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    made = Pair(tmp_path)
    try:
        made.start()
        yield made
    finally:
        made.stop()


def test_failover_to_a_router_on_the_same_journal_loses_nothing_and_runs_the_long_job_once(
    pair: Pair,
) -> None:
    assert pair.jobmanager is not None
    pair.jobmanager.wait_output(rf"jobmanager connected to {pair.a2}")
    client = Client(f"{pair.a1},{pair.b1}", send_timeout=10.0)
    long_id = f"long-{os.getpid()}"
    msgids = [f"short-{os.getpid()}-{i}" for i in range(JOBS)]
    killed = threading.Event()

    def ended() -> set[str]:
        return {token for kind, token in lines(pair.record) if kind == "end"}

    def killer() -> None:
        # While the long job runs and about a third of the short jobs are done.
        try:
            wait_for(
                lambda: ("start", long_id) in lines(pair.record) and len(ended()) >= JOBS // 3,
                120,
                "the long job to start and a third of the others to end",
                poll=0.02,
            )
            pair.fail_over()
        finally:
            killed.set()

    thread = threading.Thread(target=killer, name="failover")
    try:
        result = client.send_many(
            [(long_id.encode(), b"default", b"guarantee", body(long_id, LONG, pair.release))],
            ack_timeout=2.0,
        )
        assert result.acked == 1
        thread.start()
        resent = 0
        for start in range(0, JOBS, BATCH):
            # Paced by the job manager, so sends go on across the kill.
            wait_for(
                lambda start=start: killed.is_set() or start - len(ended()) < 2 * BATCH,
                120,
                "the job manager to catch up with the sender",
                poll=0.02,
            )
            batch = msgids[start : start + BATCH]
            result = client.send_many(
                ((m.encode(), b"default", b"guarantee", body(m, 0.005)) for m in batch),
                window=BATCH,
                ack_timeout=2.0,
            )
            assert result.acked == len(batch), result.rejected
            resent += result.resent
        thread.join(150)
        assert killed.is_set() and pair.router_b is not None
        # The job manager reached B while the long job still ran.
        pair.jobmanager.wait_output(rf"jobmanager connected to {pair.b2}", timeout=30)
        assert ("end", long_id) not in lines(pair.record), "B came after the long job ended"
        # Every job was sent and stored: once B has handed all of them out (a
        # second hand-out of the long job included), the long job may end. It
        # runs all along B's recovery and hand-out, not for a fixed time. (Short
        # jobs the job manager queued behind it end after it.)
        wait_for(
            lambda: admin_call(pair.b_admin, "MONITOR")["queued"] == 0,
            60,
            "router B to hand out every job",
            poll=0.1,
        )
        assert ("end", long_id) not in lines(pair.record), "the long job ended by itself"
        pair.release.touch()
        wait_for(lambda: {long_id, *msgids} <= ended(), 150, "every job to end", poll=0.05)
    except BaseException:
        print(pair.outputs())
        raise
    finally:
        client.close()
        thread.join(150)

    starts = Counter(token for kind, token in lines(pair.record) if kind == "start")
    twice = sorted(m for m in msgids if starts[m] > 1)
    handed_again = pair.jobmanager.output().count(f"job msgid={long_id} handed out again")
    monitor_b = admin_call(pair.b_admin, "MONITOR")
    print(
        f"\nfailover: {JOBS} guaranteed jobs + 1 long job (until B handed all out); B recovered "
        f"{monitor_b['recovered']} handed-out job(s) from the journal; the long job was "
        f"handed out to the job manager again {handed_again} time(s) and ran "
        f"{starts[long_id]} time(s); {len(twice)} short job(s) ran more than once "
        f"({sum(starts[m] - 1 for m in twice)} extra runs); {resent} REQUEST(s) resent"
    )
    assert starts[long_id] == 1, pair.outputs()
    assert set(msgids) <= set(starts)  # none lost
    assert monitor_b["queued"] == 0 and monitor_b["in_flight"] == 0
