"""Jobs waiting on a queue no connected job manager serves: one warning, and ``emq_status`` says it.

A real router (short heartbeats: the warning's grace is two heartbeat
timeouts) with a job manager that serves only ``default``; jobs sent to
``reports`` wait. The warning is logged once per queue, and again only after
a job manager served the queue and left.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator

import pytest

from django_eventmq.cli import admin_client, status_command
from django_eventmq.client.connection import Client
from tests.support import Proc, python_module, wait_for

from .conftest import JOBS, Site, start_router

SHORT = {"EMQ_HEARTBEAT_INTERVAL": "0.2", "EMQ_HEARTBEAT_TIMEOUT": "0.6"}
WARNED = "job(s) wait on queue 'reports', which no connected job manager serves"


def jobmanager(backend: str, queues: str) -> Proc:
    proc = Proc(
        python_module(
            "jobmanager", "--broker", backend, "--queues", queues, "-c", "1", "--job-module", JOBS
        ),
        env=SHORT,
    )
    proc.wait_output(r"jobmanager connected")
    return proc


@pytest.fixture
def site() -> Iterator[Site]:
    """A router and a job manager that serves only ``default``."""
    router, (frontend, backend, admin) = start_router(env=SHORT)
    client = Client(frontend)
    manager = None
    try:
        manager = jobmanager(backend, "default:10")
        yield Site(frontend, backend, admin, router, manager, client)
    finally:
        client.channel.close()
        if manager is not None:
            manager.stop()
        router.stop()


def ask(site: Site, command: str = "STATUS") -> dict:
    return admin_client.ask(site.admin, command, 5.0)


def emq_status(site: Site) -> str:
    out = io.StringIO()
    assert status_command.run(site.admin, out) == 0
    return out.getvalue()


def test_jobs_on_an_unserved_queue_are_warned_once_and_shown_by_emq_status(site: Site) -> None:
    site.send("reports", "noop", 1)
    site.send("reports", "noop", 2)
    site.router.wait_output(re.escape(f"2 {WARNED}"))
    assert ask(site)["unserved_queues"] == {"reports": 2}
    assert (
        "WARNING: no connected job manager serves reports (2 waiting): "
        "start one that names the queue (--queues)"
    ) in emq_status(site).splitlines()
    # Many housekeeping turns later, still one line. Three grace periods (1.2 s:
    # two heartbeat timeouts) suffice: warned after the first, a warning repeated
    # per turn or per grace period would show twice more by the end of the third.
    wait_for(
        lambda: ask(site)["waiting_since_by_queue"].get("reports", 0) > 3 * 1200,
        30,
        "the jobs to wait three grace periods",
        poll=0.1,
    )
    assert site.router.output().count(WARNED) == 1

    # Served: the jobs run and the warning goes.
    reports = jobmanager(site.backend, "reports:10")
    try:
        wait_for(
            lambda: ask(site)["processed_messages_by_queue"].get("reports") == 2,
            30,
            "the two jobs run",
            poll=0.1,
        )
        assert ask(site)["unserved_queues"] == {}
        assert "WARNING" not in emq_status(site)
    finally:
        reports.stop()
    # Unserved again: a job waiting there is warned about again, once.
    wait_for(lambda: len(ask(site, "ROUTER_SHOW_WORKERS")["connected_workers"]) == 1, 30)
    site.send("reports", "noop", 3)
    site.router.wait_output(re.escape(f"1 {WARNED}"))
    assert site.router.output().count(WARNED) == 2
    assert "serves reports (1 waiting)" in emq_status(site)
