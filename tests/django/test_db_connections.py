"""Worker children close stale database connections around each job, as a request would.

A real router and ``manage.py emq_jobmanager`` (one worker child) on
PostgreSQL. With ``CONN_MAX_AGE=0`` the connection a job used is closed once
the job ends. With persistent connections (``CONN_MAX_AGE=None``,
``CONN_HEALTH_CHECKS``) the test kills the job's backend server-side and the
next job must still run, on a new connection: without
``close_old_connections`` before each job the child would keep using the
dead connection and the second job would fail.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from django_eventmq.client.pool import close_clients, get_client
from tests.django import dbjobs
from tests.support import ROOT, Proc, python_module, wait_for

ANY = "tcp://127.0.0.1:*"
PG_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=test"


@pytest.fixture
def pg() -> Iterator[Any]:
    psycopg = pytest.importorskip("psycopg")
    try:
        conn = psycopg.connect(PG_DSN, autocommit=True)
    except psycopg.OperationalError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"PostgreSQL is not reachable at 127.0.0.1:5432: {exc}")
    yield conn
    conn.close()


@pytest.fixture
def stack(eventmq_settings: Any, request: pytest.FixtureRequest) -> Iterator[None]:
    router = Proc(python_module("router", "--frontend", ANY, "--backend", ANY, "--admin", ANY))
    procs = [router]
    try:
        ready = router.wait_output(r"router ready: frontend=(\S+) backend=(\S+) admin=(\S+)")
        frontend, backend = ready.group(1), ready.group(2)
        jobmanager = Proc(
            [
                *(sys.executable, str(ROOT / "manage.py"), "emq_jobmanager"),
                *("--broker", backend, "--queues", "db:10", "--concurrency", "1"),
                *("--job-module", "tests.django.dbjobs"),
            ],
            env={
                "DJANGO_SETTINGS_MODULE": "tests.settings",
                "EMQ_TEST_DB": "postgres",
                "EMQ_TEST_PG_NAME": "test",
                "EMQ_TEST_PG_CONN_MAX_AGE": request.param,
            },
        )
        procs.append(jobmanager)
        jobmanager.wait_output(r"jobmanager connected to ", timeout=60)
        eventmq_settings(BROKER_ADDR=frontend)
        yield
    finally:
        for proc in reversed(procs):
            proc.stop()


@pytest.mark.parametrize("stack", ["0"], indirect=True)
def test_the_connection_a_job_used_is_closed_when_it_ends(stack, pg):
    first = dbjobs.backend_pid.delay().wait(timeout=60)

    def backend_gone() -> bool:
        return not pg.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (first,)).fetchall()

    wait_for(backend_gone, 20, "the job's database session to end")
    assert dbjobs.backend_pid.delay().wait(timeout=60) != first


@pytest.mark.parametrize("stack", ["none"], indirect=True)
def test_a_killed_persistent_connection_does_not_fail_the_next_job(stack, pg):
    first = dbjobs.backend_pid.delay().wait(timeout=60)
    # Persistent: the session outlives the job, so there is one to kill.
    assert pg.execute("SELECT pg_terminate_backend(%s)", (first,)).fetchone()[0] is True

    second = dbjobs.backend_pid.delay().wait(timeout=60)

    assert isinstance(second, int)
    assert second != first  # a new connection, opened for this job
    # And that one is kept for the next job (persistent connections still work).
    assert dbjobs.backend_pid.delay().wait(timeout=60) == second


def test_each_thread_has_its_own_client_socket_and_keeps_it(eventmq_settings):
    settings = eventmq_settings(BROKER_ADDR="tcp://127.0.0.1:9")  # never connected to
    mine = get_client(settings.broker_addr)
    theirs: list[object] = []

    def other_thread() -> None:
        theirs.extend(get_client(settings.broker_addr) for _ in range(2))
        close_clients()  # this thread's sockets, closed where they live

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join(10)

    assert get_client(settings.broker_addr) is mine  # reused in this thread
    assert theirs[0] is theirs[1]  # reused in the other thread
    assert theirs[0] is not mine  # but never shared between threads
