"""OUR router survives the messages that kill the reference router, and keeps routing.

Each case is a message the reference 0.3.13 router dies on (traceback, rc 1) or
shuts down for (a client DISCONNECT, rc 0): see /tmp/notes/reference-peer.md
section 4. After each, our router must still answer STATUS and run a job sent
by our client through our job manager.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import zmq

from tests.support import Proc, wait_for

from .conftest import (
    INTEROP,
    RECORD_MODULE,
    Router,
    wait_records,
    without_pid,
)
from .refjobs.record import record

pytestmark = INTEROP

V = b"eMQP/1.0"


def _id() -> bytes:
    return str(uuid.uuid4()).encode()


def _request(out: str, *, args: list[str]) -> list[bytes]:
    """A valid REQUEST frame list for the ``record`` job."""
    body = [
        "run",
        {"path": RECORD_MODULE, "callable": "record", "args": args, "kwargs": {"out": out}},
    ]
    return [b"", V, b"REQUEST", _id(), b"default", b"", json.dumps(body).encode()]


#: (socket, identity or None for "let the ROUTER pick a binary one", messages).
HOSTILE: dict[str, tuple[str, bytes | None, list[list[bytes]]]] = {
    "frontend DEALER without identity": ("frontend", None, [[b"", V, b"KBAI", _id()]]),
    "backend DEALER without identity (INFORM then KBAI)": (
        "backend",
        None,
        [[b"", V, b"INFORM", _id(), b"", b"worker"], [b"", V, b"KBAI", _id()]],
    ),
    "admin DEALER without identity": ("admin", None, [[b"", V, b"STATUS", _id()]]),
    "non-UTF-8 identity": ("frontend", b"\xff\xfe\x00id", [[b"", V, b"KBAI", _id()]]),
    "non-UTF-8 body frame": (
        "frontend",
        b"client-bad-utf8",
        [[b"", V, b"REQUEST", _id(), b"default", b"", b"\xff\xfe\xfd"]],
    ),
    "non-UTF-8 queue and command": (
        "frontend",
        b"client-bad-utf8-2",
        [
            [b"", V, b"REQUEST", _id(), b"\xc3\x28", b"", b'["run", {}]'],
            [b"", V, b"\x80\x81", _id()],
        ],
    ),
    "short INFORM on the frontend": (
        "frontend",
        b"short-inform-fe",
        [[b"", V, b"INFORM", _id(), b""], [b"", V, b"INFORM", _id()]],
    ),
    "short INFORM on the backend": (
        "backend",
        b"short-inform-be",
        [[b"", V, b"INFORM", _id(), b""], [b"", V, b"INFORM", _id()]],
    ),
    "short REPLY from a registered worker": (
        "backend",
        b"short-reply-worker",
        [
            [b"", V, b"INFORM", _id(), b'[[10, "nosuchqueue"]]', b"worker"],
            [b"", V, b"REPLY", _id(), b"only-one"],
            [b"", V, b"REPLY", _id()],
            [b"", V, b"KBAI", _id()],
        ],
    ),
    "client DISCONNECT on the frontend": (
        "frontend",
        b"client-disconnect",
        [[b"", V, b"DISCONNECT", _id()]],
    ),
    "truncated and empty messages": (
        "frontend",
        b"client-truncated",
        [
            [b""],
            [b"", V],
            [b"", V, b"REQUEST"],
            [b"garbage"],
            [b"", b"eMQP/9.9", b"REQUEST", _id()],
        ],
    ),
}


@pytest.fixture
def raw_dealer() -> Iterator[Callable[[str, bytes | None], zmq.Socket[bytes]]]:
    """Make raw DEALER sockets (closed after the test)."""
    sockets: list[zmq.Socket[bytes]] = []

    def make(addr: str, identity: bytes | None) -> zmq.Socket[bytes]:
        sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        if identity is not None:
            sock.setsockopt(zmq.IDENTITY, identity)
        sock.connect(addr)
        sockets.append(sock)
        return sock

    yield make
    for sock in sockets:
        sock.close(linger=0)


def _recv_until(
    sock: zmq.Socket[bytes], command: bytes, what: str, about: bytes | None = None
) -> list[bytes]:
    """Receive on ``sock`` until ``command`` (answering msgid ``about``) arrives; 5 s at most."""

    def one() -> list[bytes] | None:
        while sock.poll(0):
            frames = sock.recv_multipart()
            if frames[2:3] == [command] and (about is None or about in frames[4:]):
                return frames
        return None

    return wait_for(one, 5, what)  # type: ignore[no-any-return]


def _probe(socket_name: str, sock: zmq.Socket[bytes], case: str, out: Path) -> None:
    """Send a valid message on the SAME socket after the hostile ones and see it handled.

    Messages from one peer arrive in order, so its answer proves the router
    got past everything sent before it.
    """
    if socket_name == "frontend":
        request = _request(str(out), args=[f"probe {case}"])
        sock.send_multipart(request)
        _recv_until(sock, b"ACK", "the ACK of the probe REQUEST", request[3])
    elif socket_name == "backend":
        inform = [b"", V, b"INFORM", _id(), b'[[10, "probe-queue"]]', b"worker"]
        sock.send_multipart(inform)
        _recv_until(sock, b"ACK", "the ACK of the probe INFORM", inform[3])
        sock.send_multipart([b"", V, b"KBAI", _id()])
    else:
        sock.send_multipart([b"", V, b"STATUS", _id()])
        _recv_until(sock, b"REPLY", "the answer to the probe STATUS")


@pytest.mark.parametrize("case", list(HOSTILE))
def test_router_survives_and_still_routes(
    case: str,
    our_stack: tuple[Router, Proc],
    raw_dealer: Callable[[str, bytes | None], zmq.Socket[bytes]],
    records_file: Path,
    use_broker: Callable[[str], None],
) -> None:
    router, _ = our_stack
    socket_name, identity, messages = HOSTILE[case]
    addr = {"frontend": router.frontend, "backend": router.backend, "admin": router.admin_addr}
    sock = raw_dealer(addr[socket_name], identity)
    for frames in messages:
        sock.send_multipart(frames)
    _probe(socket_name, sock, case, records_file)
    use_broker(router.frontend)

    record.delay(case, out=str(records_file))

    expected = [[case]] + ([[f"probe {case}"]] if socket_name == "frontend" else [])
    records = wait_records(records_file, count=len(expected))
    assert sorted(r["args"] for r in records) == sorted(expected)
    assert "processed_messages_by_queue" in router.admin().call("STATUS")
    assert router.alive()


def test_dealer_without_identity_gets_its_job_run_and_its_ack(
    our_stack: tuple[Router, Proc],
    raw_dealer: Callable[[str, bytes | None], zmq.Socket[bytes]],
    records_file: Path,
) -> None:
    """A client with a binary (ROUTER-assigned) identity is a normal client to us."""
    router, _ = our_stack
    sock = raw_dealer(router.frontend, None)
    request = _request(str(records_file), args=["raw"])
    sock.send_multipart(request)

    assert without_pid(wait_records(records_file)) == [{"args": ["raw"], "kwargs": {}}]
    assert sock.poll(5000), "no answer to the REQUEST"
    answer = sock.recv_multipart()
    assert answer[:3] == [b"", V, b"ACK"] and answer[4] == request[3]


def test_bad_input_is_logged_once_per_peer_and_reason(
    our_stack: tuple[Router, Proc], raw_dealer: Callable[[str, bytes | None], zmq.Socket[bytes]]
) -> None:
    router, _ = our_stack
    sock = raw_dealer(router.frontend, b"repeat-offender")
    for _ in range(5):
        sock.send_multipart([b"", V, b"REQUEST", _id(), b"default", b"", b"\xff\xfe"])
    sock.send_multipart([b"", V, b"KBAI", _id()])  # a valid message after the bad ones
    wait_for(lambda: "repeat-offender" in router.proc.output(), 5, "a warning naming the peer")
    lines = [line for line in router.proc.output().splitlines() if "repeat-offender" in line]
    assert len(lines) == 1, lines
    assert "WARNING" in lines[0]
