"""A real router and job manager (``python -m django_eventmq``) for the ops tests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from django_eventmq.client.connection import Client
from django_eventmq.protocol import Request, new_msgid, parse_headers
from tests.support import Proc, python_module

ANY = "tcp://127.0.0.1:*"
JOBS = "tests.system.ops.jobs"


@dataclass
class Site:
    frontend: str
    backend: str
    admin: str
    router: Proc
    jobmanager: Proc
    #: Kept open: closing a socket right after a send (linger 0) can drop the message.
    client: Client

    def send(self, queue: str, callable_: str, *args: object, headers: str = "") -> str:
        """Queue ``tests.system.ops.jobs.<callable_>(*args)`` on ``queue``; its msgid."""
        body = json.dumps(
            ["run", {"path": JOBS, "callable": callable_, "args": list(args), "kwargs": {}}]
        )
        return self.client.send(
            Request(msgid=new_msgid(), queue=queue, headers=parse_headers(headers), body_text=body)
        )


def start_router(
    *extra: str, env: dict[str, str] | None = None
) -> tuple[Proc, tuple[str, str, str]]:
    """A router process (journal off unless ``extra`` says otherwise); ``env``: ``EMQ_*``."""
    router = Proc(
        python_module(
            "router", "--frontend", ANY, "--backend", ANY, "--admin", ANY, "--no-journal", *extra
        ),
        env=env,
    )
    ready = router.wait_output(r"router ready: frontend=(\S+) backend=(\S+) admin=(\S+)")
    return router, (ready.group(1), ready.group(2), ready.group(3))


def start_jobmanager(backend: str, *extra: str) -> Proc:
    """A job manager process running the ops tests' jobs (not waited for)."""
    return Proc(python_module("jobmanager", "--broker", backend, "--job-module", JOBS, *extra))


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    """A router and a job manager serving email:30,default:10 with two workers."""
    router, (frontend, backend, admin) = start_router()
    jobmanager = start_jobmanager(backend, "--queues", "email:30,default:10", "--concurrency", "2")
    client = Client(frontend)
    try:
        jobmanager.wait_output(r"jobmanager connected")
        yield Site(frontend, backend, admin, router, jobmanager, client)
    finally:
        client.channel.close()
        jobmanager.stop()
        router.stop()
