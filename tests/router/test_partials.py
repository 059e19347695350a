"""The router forwards a job manager's PARTIAL to the client that asked, and turns
DONE ``refused`` into REJECT; raw DEALER peers stand in for both sides."""

from __future__ import annotations

import json
import logging

import pytest

from tests.router.test_router import ROUTER_LOG, Harness, h, warnings
from tests.router_harness import start_router, zctx

__all__ = ["h", "start_router", "zctx"]  # fixtures used here

REFUSAL = json.dumps(
    {
        "value": "job 'x.y' is not registered",
        "error": {"type": "JobNotAllowed", "message": "job 'x.y' is not registered"},
    }
)


def handed_out(h: Harness, headers: str = "reply-requested"):
    """A client, a job manager, and the msgid of a job the job manager now holds."""
    worker = h.worker("jm")
    client = h.peer("frontend", "client")
    msgid = h.request(client, headers=headers)
    assert worker.expect("REQUEST")[1] == msgid
    return client, worker, msgid


def test_the_routers_features_offer_partial(h: Harness) -> None:
    peer = h.peer("backend", "jm")
    peer.send("INFORM", "", "worker")
    peer.expect("ACK")
    assert json.loads(peer.expect("FEATURES")[2])["partial"] == 1


def test_partials_reach_the_client_in_order_then_the_reply(h: Harness) -> None:
    client, worker, msgid = handed_out(h)
    for step in range(3):
        worker.send("PARTIAL", msgid, json.dumps({"value": step}))
    worker.send("DONE", msgid, "ok", '{"value": "end"}')
    got = [client.expect("PARTIAL") for _ in range(3)]
    assert [(p[2], json.loads(p[3])["value"]) for p in got] == [(msgid, 0), (msgid, 1), (msgid, 2)]
    reply = client.expect("REPLY")
    assert reply[2:] == ['{"value": "end"}', msgid]


def test_partials_are_not_forwarded_when_nobody_may_take_them(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=ROUTER_LOG)
    client, worker, quiet = handed_out(h, headers="")  # no reply asked
    other = h.worker("jm2", ready=0)  # connected, but takes no job
    worker.send("PARTIAL", quiet, '{"value": "nobody asked"}')
    other.send("PARTIAL", quiet, '{"value": "not its job"}')
    worker.send("PARTIAL", "never-sent", '{"value": "unknown job"}')
    worker.send("DONE", quiet, "ok", '{"value": 1}')
    worker.send("READY")
    # Then a job that asked: only its partial arrives.
    loud = h.request(client, headers="reply-requested")
    assert worker.expect("REQUEST")[1] == loud
    worker.send("PARTIAL", loud, '{"value": "yes"}')
    assert client.expect("PARTIAL")[2:] == [loud, '{"value": "yes"}']
    assert sum("PARTIAL for msgid" in r.getMessage() for r in caplog.records) == 3
    assert h.slots(worker) is not None  # the router serves on


def test_a_malformed_partial_is_dropped_with_one_warning(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    client, worker, msgid = handed_out(h)
    worker.send("PARTIAL", msgid, "not json")
    worker.send("PARTIAL", msgid, "not json")
    worker.send("DONE", msgid, "ok", '{"value": 2}')
    assert client.expect("REPLY")[2:] == ['{"value": 2}', msgid]  # no PARTIAL came first
    bad = [w for w in warnings(caplog) if "PARTIAL: payload is not JSON" in w]
    assert len(bad) == 1


def test_done_refused_becomes_reject_with_the_reason(h: Harness) -> None:
    client, worker, msgid = handed_out(h)
    worker.send("DONE", msgid, "refused", REFUSAL)
    reject = client.expect("REJECT")
    assert reject[2:] == [msgid, "job 'x.y' is not registered"]
    worker.send("READY")
    h.request(client)  # its ACK is the client's next message: no REPLY besides the REJECT


def test_done_refused_of_a_job_that_asked_no_reply_sends_nothing(h: Harness) -> None:
    client, worker, msgid = handed_out(h, headers="")
    worker.send("DONE", msgid, "refused", REFUSAL)
    worker.send("READY")
    follow = h.request(client, headers="reply-requested")  # its ACK is the next message
    assert worker.expect("REQUEST")[1] == follow
