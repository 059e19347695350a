"""Fixtures of the Spark tests: one local Spark session and one router + job manager.

Both are shared by every test of this directory (a Spark session takes 10-20 s
to start here): tests tell their jobs apart by run id. A test that breaks the
session (a timeout inside a Py4J call, a dead JVM) gets it replaced for the
next test (``sessions.py``). The router and the
job manager are the example site's ``manage.py emq_router`` /
``emq_jobmanager`` processes, on loopback, with a temporary SQLite database
and journal; the ``send_digest`` jobs they run write ``DigestSent`` rows that
the tests read with sqlite3.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import zmq

from tests.contrib.spark.sessions import SparkSessions
from tests.support import ROOT, Proc, wait_for

PYSPARK_MISSING = "pyspark is not installed (pip install pyspark 'pandas<3' pyarrow)"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "spark: needs pyspark (and a JVM): a local Spark session on loopback"
    )


def manage(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "manage.py"), *args]


@dataclass
class Stack:
    """The router and job manager the Spark tests send to."""

    frontend: str
    admin: str
    db: Path
    env: dict[str, str]
    procs: list[Proc]

    def count(self, sql: str, *params: object) -> int:
        with sqlite3.connect(self.db, timeout=10) as conn:
            return int(conn.execute(sql, params).fetchone()[0] or 0)

    def digests(self, run_id: str) -> int:
        return self.count("SELECT count(*) FROM digests_digestsent WHERE run_id = ?", run_id)

    def most_deliveries(self, run_id: str) -> int:
        return self.count("SELECT max(deliveries) FROM digests_digestsent WHERE run_id = ?", run_id)

    def status(self) -> dict[str, Any]:
        """The router's admin STATUS."""
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IDENTITY, f"spark-test-admin-{uuid.uuid4()}".encode())
        try:
            sock.connect(self.admin)
            sock.send_multipart([b"", b"eMQP/1.0", b"STATUS", uuid.uuid4().hex.encode()])
            assert sock.poll(10_000), "no answer to STATUS"
            return json.loads(sock.recv_multipart()[-1])  # type: ignore[no-any-return]
        finally:
            sock.close(linger=0)

    def idle(self, queue: str) -> bool:
        """Nothing of ``queue`` waits or runs in the router."""
        status = self.status()
        return not status["inflight_messages_by_queue"].get(queue) and not status[
            "waiting_messages_by_queue"
        ].get(queue)

    def wait_done(self, run_id: str, expected: int, queue: str = "email") -> None:
        """Wait until ``expected`` digests of ``run_id`` exist and the queue is drained."""
        try:
            wait_for(lambda: self.digests(run_id) >= expected, 60, f"{expected} digests")
            wait_for(lambda: self.idle(queue), 60, f"queue {queue} drained")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.logs()}") from None

    def logs(self) -> str:
        return "\n".join(f"--- {p.args[2]}\n{p.output()[-4000:]}" for p in self.procs)


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """emq_router + emq_jobmanager of the example site (queues email, reports, default)."""
    tmp = tmp_path_factory.mktemp("spark-stack")
    db = tmp / "example.sqlite3"
    env = {
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
        "DATABASE_URL": f"sqlite:///{db}",
        "DEBUG": "false",
        "EMQ_JOURNAL_PATH": str(tmp / "journal-{frontend}.sqlite3"),
    }
    clean = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    done = subprocess.run(
        manage("migrate", "--noinput"),
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
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
        frontend, backend, admin = ready.group(1), ready.group(2), ready.group(3)
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
        yield Stack(frontend, admin, db, env, procs)
    finally:
        for proc in reversed(procs):
            proc.stop()


#: The exception the test's own code raised (None if none), for the ``spark`` fixture.
CALL_ERROR = pytest.StashKey[BaseException | None]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if call.when == "call":
        item.stash[CALL_ERROR] = call.excinfo.value if call.excinfo else None
    return report


@pytest.fixture(scope="package")
def spark_sessions() -> Iterator[SparkSessions]:
    """One local Spark session for every Spark test: 2 threads, 2 attempts per task,
    started again after a test that broke it (tests/contrib/spark/sessions.py).

    Stopped after this directory, and the environment it set for its Python
    workers (PYTHONPATH, PYSPARK_*, SPARK_*) put back: the tests that run after
    these (a new project installing the wheel) must not import this checkout.
    """
    pytest.importorskip("pyspark", reason=PYSPARK_MISSING, exc_type=ImportError)
    from django_eventmq.contrib.spark import local_session

    saved = dict(os.environ)

    def start() -> Any:
        return local_session(
            "django-eventmq-tests",
            "local[2,2]",
            conf={"spark.sql.shuffle.partitions": "4", "spark.default.parallelism": "2"},
            python_path=[ROOT],
        )

    sessions = SparkSessions(start)
    try:
        yield sessions
    finally:
        sessions.close()
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture
def spark(spark_sessions: SparkSessions, request: pytest.FixtureRequest) -> Iterator[Any]:
    """The shared Spark session, checked after the test (and replaced if it broke)."""
    yield spark_sessions.get(request.node.nodeid)
    spark_sessions.after(request.node.nodeid, request.node.stash.get(CALL_ERROR, None))
