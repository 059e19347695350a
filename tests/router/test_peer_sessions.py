"""A real router treats each job manager as its negotiation session says: what the
router announces after the ACK, and what the job manager announced back (packed
jobs, CANCEL) decides what it is sent. The session alone: tests/protocol/test_session.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from django_eventmq.protocol import Cancel, Heartbeat, Message, Request, decode
from django_eventmq.protocol.features import ROUTER_FEATURES
from tests.router.test_router import Harness, Peer
from tests.support import wait_for


def _next(peer: Peer) -> tuple[Message, bool]:
    """The next message the router sent ``peer`` (HEARTBEATs skipped), and whether it was packed."""
    while True:
        raw = peer.recv_raw()
        message = decode(raw)
        if not isinstance(message, Heartbeat):
            return message, len(raw) == 1


def _job_manager(h: Harness, name: str, announced: dict[str, int]) -> Peer:
    """A job manager that INFORMed, answered FEATURES with ``announced`` and has one slot."""
    peer = h.peer("backend", name)
    inform = peer.send("INFORM", "", "worker")
    assert peer.expect("ACK")[2] == inform
    peer.expect("FEATURES")
    peer.send("FEATURES", json.dumps(announced))
    peer.send("READY")
    wait_for(lambda: h.slots(peer) == 1, what=f"{name} to have a slot")
    return peer


def test_the_router_announces_router_features_right_after_the_ack(
    start_router: Callable[..., Harness],
) -> None:
    peer = start_router().peer("backend", "jm")
    inform = peer.send("INFORM", "", "worker")
    assert peer.expect("ACK")[2] == inform
    assert json.loads(peer.expect("FEATURES")[2]) == dict(ROUTER_FEATURES)


@pytest.mark.parametrize(
    ("announced", "packed", "cancel"),
    [
        ({"done": 1}, False, False),
        ({"done": 1, "cancel": 1}, False, True),
        ({"done": 1, "packed": 1}, True, False),
        ({"done": 1, "packed": 1, "cancel": 1}, True, True),
    ],
)
def test_a_job_manager_gets_exactly_what_it_announced(
    start_router: Callable[..., Harness], announced: dict[str, int], packed: bool, cancel: bool
) -> None:
    h = start_router()
    worker = _job_manager(h, "jm", announced)
    client = h.peer("frontend", "client")
    msgid = h.request(client, headers="reply-requested")
    job, was_packed = _next(worker)
    assert isinstance(job, Request) and job.msgid == msgid
    assert was_packed is packed
    client.send("CANCEL", msgid)
    h.request(client)  # the CANCEL has been handled when this is ACKed
    if cancel:
        sent, _ = _next(worker)
        assert isinstance(sent, Cancel) and sent.job_msgid == msgid
    else:
        assert not worker.pending()
    # It reports with DONE either way: the slot it frees takes the next job.
    worker.send("DONE", msgid, "cancelled" if cancel else "ok", '{"value": null}')
    nxt, _ = _next(worker)
    assert isinstance(nxt, Request) and nxt.msgid != msgid
