"""Soft time limits end to end: a real router and job manager (``python -m django_eventmq``).

- a REQUEST whose ``soft-timeout`` is not a whole number > 0 below its ``timeout``
  (a foreign client; ours cannot build one) is dropped by the router as malformed,
  as any bad header is, with one warning that says why, and never runs;
- a job sent by a client with ``soft_timeout`` catches the limit, cleans up, and
  its value says so.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from django_eventmq.client.handles import JobHandle
from django_eventmq.client.pool import get_client
from django_eventmq.protocol import Headers, JobBody, new_msgid
from django_eventmq.protocol.frame_fields import request_frames
from django_eventmq.runtime import transport
from tests.jobs_fixtures import limits
from tests.jobs_fixtures.limits_stack import router_and_jobmanager
from tests.support import Proc


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Proc]]:
    """A router and a job manager with one worker, serving the limits fixtures."""
    journal = tmp_path_factory.mktemp("soft-e2e") / "journal.sqlite3"
    with router_and_jobmanager(journal, concurrency=1) as running:
        yield running


def cleans_up_body(marker: Path) -> str:
    return JobBody(path=limits.MODULE, callable="cleans_up", args=(60, str(marker))).encode()


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        (b"reply-requested,timeout:5,soft-timeout:5", "must be less than timeout (5)"),
        (b"reply-requested,soft-timeout:0", "whole number of seconds > 0, got 0"),
        (b"reply-requested,soft-timeout:soon", "whole number of seconds, got 'soon'"),
    ],
)
def test_the_router_drops_a_bad_soft_timeout_and_says_why(
    stack: tuple[str, Proc], tmp_path: Path, headers: bytes, reason: str
) -> None:
    frontend, router = stack
    marker = tmp_path / "marker"
    body = cleans_up_body(marker).encode()
    with transport.Channel(transport.DEALER, connect=frontend) as channel:
        channel.send_frames(request_frames(new_msgid().encode(), b"default", headers, body))
        router.wait_output(re.escape(reason) + r".*dropped malformed message", timeout=20)
    assert not marker.exists()  # never run


def test_a_client_job_past_its_soft_timeout_cleans_up_and_wait_says_so(
    stack: tuple[str, Proc], eventmq_settings: Any, tmp_path: Path
) -> None:
    settings = eventmq_settings(BROKER_ADDR=stack[0], ACK_TIMEOUT=5)
    marker = tmp_path / "marker"
    headers = Headers(reply_requested=True, timeout=20, soft_timeout=1)
    client = get_client(settings.broker_addr)
    handle = JobHandle(client.request("default", cleans_up_body(marker), headers, new_msgid()))
    assert handle.wait(timeout=30) == "cleaned up after: soft time limit of 1s exceeded"
    assert [line.split()[0] for line in marker.read_text().splitlines()] == ["start", "cleanup"]
