"""The router survives bad input and vanished peers, says so once, and keeps routing."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import zmq

from django_eventmq.protocol.packed import pack
from django_eventmq.router.router import Router
from tests.router.test_router import (
    JOB,
    ROUTER_LOG,
    Harness,
    Peer,
    make_settings,
    warnings,
)
from tests.support import wait_for


@pytest.fixture
def h(zctx: zmq.Context[Any]) -> Iterator[Harness]:
    harness = Harness(zctx, make_settings())
    yield harness
    harness.close()


V = b"eMQP/1.0"

# (socket, frames, what the warning says)
BAD: list[tuple[str, list[bytes], str]] = [
    ("frontend", [b"hello"], "must be a packed eMQP message"),
    ("frontend", [b"0,8,7\nxx"], "packed message: the head's lengths add up to 15 bytes"),
    ("frontend", [b"", V, b"REQUEST"], "too short"),
    ("frontend", [b"junk", V, b"REQUEST", b"id", b"q", b"", b"{}"], "frame 0 must be empty"),
    ("frontend", [b"", b"eMQP/0.9", b"REQUEST", b"id", b"q", b"", b"{}"], "protocol version"),
    ("frontend", [b"", V, b"BOGUS", b"id"], "unknown command"),
    ("frontend", [b"", V, b"REQUEST", b"id", b"q", b"", b"\xff\xfe"], "not valid UTF-8"),
    ("frontend", [b"", V, b"REQUEST", b"id", b"q", b"timeout:x", b"{}"], "header timeout"),
    ("frontend", [b"", V, b"REQUEST", b"id", b"q"], "expected 3 frame(s)"),
    ("frontend", [b"", V, b"REQUEST", b"", b"q", b"", b"{}"], "msgid must be"),
    ("frontend", [b"", V, b"STATUS", b"id"], "unknown command"),
    ("frontend", [b"", V, b"READY", b"id"], "unexpected command READY"),
    ("frontend", [b"", V, b"INFORM", b"id", b"", b"worker"], "worker INFORM on the frontend"),
    ("backend", [b"", V, b"READY", b"id"], "READY before INFORM"),
    # A busy job manager the router dropped says only DONE and READY: told as well.
    ("backend", [b"", V, b"DONE", b"id", b"job-1", b"ok", b"{}"], "DONE before INFORM"),
    ("backend", [b"0,8,5\nxx"], "packed message: the head's lengths add up to 13 bytes"),
    # Packed, as our job managers send a DONE alone: read straight, or as above.
    ("backend", [pack([b"", V, b"DONE", b"id", b"job-1", b"ok", b"{}"])], "DONE before INFORM"),
    (
        "backend",
        [b"0,8,4,2,5,2,2\neMQP/1.0DONEidjob-1ok{}x"],
        "packed message: the head's lengths add up to 23 bytes",
    ),
    ("backend", [b"", V, b"INFORM", b"id", b"[[x", b"worker"], "queue list"),
    ("backend", [b"", V, b"INFORM", b"id", b"", b"martian"], "peer type"),
    ("backend", [b"", V, b"INFORM", b"id", b"", b"scheduler"], "scheduler INFORM"),
    ("backend", [b"", V, b"REQUEST", b"id", b"q", b"", b"{}"], "unexpected command REQUEST"),
    ("backend", [b"", V, b"HEARTBEAT", b"id", b"soon"], "not a number"),
    ("admin", [b"", V, b"STATUS"], "too short"),
    ("admin", [b"", V, b"BOGUS", b"id"], "unknown command"),
    ("admin", [b"", V, b"REQUEST", b"id", b"q", b"", b"{}"], "unexpected command REQUEST"),
]


def _sync(h: Harness, peer: Peer, where: str) -> list[str]:
    """A good message from the same peer, answered: everything it sent before was handled.

    Returns the commands it received before the answer."""
    before: list[str] = []
    if where == "frontend":
        msgid, answer = peer.send("REQUEST", "elsewhere", "", JOB), "ACK"
    elif where == "backend":
        msgid, answer = peer.send("INFORM", '[[1, "elsewhere"]]', "worker"), "ACK"
    else:
        msgid, answer = peer.send("STATUS"), "REPLY"
    while True:
        got = [f.decode() for f in peer.recv_raw()[2:]]
        if got[0] == answer and (answer == "REPLY" or got[2] == msgid):
            return before
        before.append(got[0])


@pytest.mark.parametrize(
    ("where", "frames", "reason"), BAD, ids=[f"{w}-{r}-{i}" for i, (w, _f, r) in enumerate(BAD)]
)
def test_malformed_message_is_logged_once_and_routing_goes_on(
    h: Harness, caplog: pytest.LogCaptureFixture, where: str, frames: list[bytes], reason: str
) -> None:
    caplog.set_level(logging.DEBUG, logger=ROUTER_LOG)
    peer = h.peer(where, "bad")
    peer.send_raw(frames)
    peer.send_raw(frames)  # the same again: no second warning
    received = _sync(h, peer, where)
    said = warnings(caplog)
    assert len(said) == 1, said
    assert reason in said[0]
    assert peer.identity.decode() in said[0]
    if reason.endswith("before INFORM"):
        assert received == ["DISCONNECT"]  # told once; the peer is expected to INFORM
    else:
        assert received == []

    worker = h.worker("good")
    client = h.peer("frontend", "client")
    msgid = h.request(client)
    assert worker.expect("REQUEST")[1] == msgid


def test_binary_identity_worker_is_served_and_shown_escaped(h: Harness) -> None:
    worker = h.peer("backend", b"\xfe\xffworker")
    worker.send("INFORM", "", "worker")
    worker.expect("ACK")
    worker.send("READY")
    wait_for(lambda: h.ask("ROUTER_SHOW_WORKERS")["connected_workers"])
    shown = h.ask("ROUTER_SHOW_WORKERS")["connected_workers"]
    assert list(shown) == ["\\xfe\\xffworker"]
    client = h.peer("frontend", "client")
    msgid = h.request(client)
    assert worker.expect("REQUEST")[1] == msgid


def test_reply_without_request_id_is_warned_once(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    worker = h.worker("w")
    worker.send("REPLY", '{"value": 1}')
    worker.send("REPLY", '{"value": 1}')
    worker.send("HEARTBEAT", "1.0")
    wait_for(lambda: warnings(caplog), what="a warning")
    h.ask("STATUS")
    assert len(warnings(caplog)) == 1
    assert "REPLY without" in warnings(caplog)[0]


# -- vanished peers (the router is stepped in this thread) ---------------------------


class Stepped:
    """A router driven with loop_once() from the test thread."""

    def __init__(self, ctx: zmq.Context[Any]) -> None:
        self.router = Router(make_settings())
        self.router.start()
        self.ctx = ctx
        self.peers: list[Peer] = []

    def peer(self, addr: str, name: bytes) -> Peer:
        peer = Peer(self.ctx, addr, name)
        self.peers.append(peer)
        return peer

    def until(self, condition: Callable[[], Any], what: str) -> None:
        def step() -> Any:
            self.router.loop_once(timeout_ms=5)
            return condition()

        wait_for(step, what=what)

    def gone(self, channel_socket: zmq.Socket[Any], identity: bytes) -> None:
        """Wait until the router's socket knows ``identity`` has disconnected."""

        def unreachable() -> bool:
            try:
                channel_socket.send_multipart([identity, b""], zmq.NOBLOCK)
            except zmq.ZMQError as exc:
                return exc.errno == zmq.EHOSTUNREACH
            return False

        wait_for(unreachable, what=f"{identity!r} to be gone")

    def worker(self, name: bytes) -> Peer:
        worker = self.peer(self.router.backend_address, name)
        worker.send("INFORM", "", "worker")
        worker.send("READY")
        workers = self.router.routing.workers
        self.until(
            lambda: name in workers and workers[name].slots + len(workers[name].inflight) == 1,
            "the worker's READY",
        )
        worker.expect("ACK")
        return worker

    def close(self) -> None:
        for peer in self.peers:
            peer.close()
        self.router.close()


@pytest.fixture
def stepped(zctx: zmq.Context[Any]) -> Iterator[Stepped]:
    s = Stepped(zctx)
    yield s
    s.close()


def test_reply_for_a_client_that_is_gone_is_dropped(stepped: Stepped) -> None:
    router = stepped.router
    worker = stepped.worker(b"w1")
    client = stepped.peer(router.frontend_address, b"fleeting")
    msgid = client.send("REQUEST", "default", "reply-requested", JOB)
    stepped.until(client.pending, "the ACK")
    assert client.expect("ACK")[2] == msgid
    assert worker.expect("REQUEST")[1] == msgid
    client.close()
    stepped.gone(router.frontend.socket, b"fleeting")
    worker.send("REPLY", '{"value": 1}', msgid)
    worker.send("READY")
    stepped.until(lambda: router.routing.processed_by_queue["default"] == 1, "the REPLY")
    assert msgid not in router.routing.inflight

    other = stepped.peer(router.frontend_address, b"steady")
    again = other.send("REQUEST", "default", "", JOB)
    stepped.until(worker.pending, "the next REQUEST")
    assert worker.expect("REQUEST")[1] == again


def test_request_for_a_worker_that_is_gone_goes_back_to_wait(
    stepped: Stepped, caplog: pytest.LogCaptureFixture
) -> None:
    router = stepped.router
    worker = stepped.worker(b"vanishing")
    worker.close()
    stepped.gone(router.backend.socket, b"vanishing")
    client = stepped.peer(router.frontend_address, b"client")
    msgid = client.send("REQUEST", "default", "", JOB)
    stepped.until(client.pending, "the ACK")
    assert client.expect("ACK")[2] == msgid
    assert b"vanishing" not in router.routing.workers
    assert [j.msgid for j in router.routing.waiting["default"]] == [msgid]
    assert any("vanishing dropped (unreachable)" in w for w in warnings(caplog))

    rescuer = stepped.worker(b"rescuer")
    stepped.until(rescuer.pending, "the REQUEST")
    assert rescuer.expect("REQUEST")[1] == msgid


def test_acks_and_heartbeats_to_gone_peers_do_not_stop_the_router(stepped: Stepped) -> None:
    router = stepped.router
    client = stepped.peer(router.frontend_address, b"hit-and-run")
    client.send("SCHEDULE", "default", "", "60", JOB, "")
    client.close()
    # An ACK for a vanished client, and a scheduler that vanished: no exception.
    router.loop_once(timeout_ms=50)
    stepped.gone(router.frontend.socket, b"hit-and-run")
    router.schedulers.add(b"ghost-scheduler", 0.0)
    router.loop_once(timeout_ms=0, now=1e9)  # heartbeat due, and it expires
    assert router.schedulers.peers == {}
    router.loop_once(timeout_ms=0)
