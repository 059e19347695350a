"""The router's limits (MAX_BODY_BYTES, header bounds, MAX_FRAMES): a client's message
outside them gets REJECT with the reason, is warned about once, and the router goes on."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import zmq

from tests.core.test_router import JOB, ROUTER_LOG, Harness, Peer, make_settings, warnings

#: Small enough that a test body is over it; the default job body is well under it.
BODY_LIMIT = 1000
BIG_JOB = '["run", {"path": "vjobs", "callable": "hello", "args": ["' + "x" * BODY_LIMIT + '"]}]'
V = b"eMQP/1.0"


@pytest.fixture
def h(zctx: zmq.Context[Any]) -> Iterator[Harness]:
    harness = Harness(zctx, make_settings(max_body_bytes=BODY_LIMIT, max_retry_count=5))
    yield harness
    harness.close()


def still_serves(h: Harness, client: Peer) -> None:
    """A job within the limits is ACKed and handed out."""
    worker = h.worker(f"worker-{len(h.peers)}")
    msgid = h.request(client)
    assert worker.expect("REQUEST")[1] == msgid


@pytest.mark.parametrize(
    ("headers", "body", "reason"),
    [
        ("", BIG_JOB, f"REQUEST body is larger than {BODY_LIMIT} bytes (MAX_BODY_BYTES)"),
        ("retry-count:6", JOB, "REQUEST header retry-count is above 5"),
        ("timeout:700000", JOB, "REQUEST header timeout is above 604800 seconds"),
        ("reply-requested,priority:9999999", JOB, "REQUEST header priority is outside"),
    ],
    ids=["body", "retry-count", "timeout", "priority"],
)
def test_request_over_a_limit_gets_reject_once_warned_and_the_router_serves_on(
    h: Harness, caplog: pytest.LogCaptureFixture, headers: str, body: str, reason: str
) -> None:
    caplog.set_level(logging.DEBUG, logger=ROUTER_LOG)
    client = h.peer("frontend", "client")
    first = client.send("REQUEST", "default", headers, body)
    second = client.send("REQUEST", "default", headers, body)
    for msgid in (first, second):
        reject = client.expect("REJECT")
        assert reject[1] != msgid
        assert reject[2] == msgid
        assert reject[3].startswith(reason)
    said = warnings(caplog)
    assert len(said) == 1, said  # once per peer and reason
    assert reason in said[0] and client.identity.decode() in said[0] and first in said[0]
    assert h.ask("MONITOR")["rejected"] == 2
    assert h.ask("STATUS")["waiting_messages_by_queue"] == {}
    still_serves(h, client)


def test_schedule_over_the_body_limit_gets_reject_and_is_not_forwarded(h: Harness) -> None:
    scheduler = h.peer("frontend", "sched")
    scheduler.send("INFORM", "", "scheduler")
    scheduler.expect("ACK")
    client = h.peer("frontend", "client")
    msgid = client.send("SCHEDULE", "default", "", "60", BIG_JOB, "")
    reject = client.expect("REJECT")
    assert reject[2] == msgid and "SCHEDULE body is larger" in reject[3]
    assert not scheduler.pending()
    assert h.ask("ROUTER_SHOW_SCHEDULERS")["buffered_schedule_messages"] == 0
    still_serves(h, client)


def test_too_many_frames_is_dropped_with_one_warning(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    client = h.peer("frontend", "client")
    frames = [b"", V, b"REQUEST", b"id", b"default", b"", JOB.encode(), *([b"x"] * 40)]
    client.send_raw(frames)
    client.send_raw(frames)
    still_serves(h, client)
    said = warnings(caplog)
    assert len(said) == 1 and "frames" in said[0], said
    assert not client.pending()  # no msgid can be trusted: nothing is answered


def test_worker_message_over_a_limit_is_dropped_and_the_worker_kept(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    worker = h.worker("w")
    worker.send_raw([b"", V, b"HEARTBEAT", b"id", *([b"y"] * 40)])
    worker.send_raw([b"", V, b"HEARTBEAT", b"id", *([b"y"] * 40)])
    client = h.peer("frontend", "client")
    msgid = h.request(client)
    assert worker.expect("REQUEST")[1] == msgid
    said = warnings(caplog)
    assert len(said) == 1 and "frames" in said[0] and "backend" in said[0], said
