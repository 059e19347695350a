"""A publisher process applies MAX_BODY_BYTES, MAX_JSON_DEPTH and the header bounds to
PUBLISH: an event outside them is dropped and logged once per peer and reason, events
at the bounds go through, and the publisher keeps relaying."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
import zmq

from tests.support import Proc, python_module, wait_for

MAX_BODY = 2000
MAX_DEPTH = 8
PEERS = (b"peer-a", b"peer-b")


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


#: (topic, frames after the msgid, the reason the publisher logs) of each bad event.
BAD: list[tuple[bytes, list[bytes], str]] = [
    (
        b"limits.big",
        [json.dumps("x" * MAX_BODY).encode()],
        f"PUBLISH body is larger than {MAX_BODY} bytes (MAX_BODY_BYTES)",
    ),
    (b"limits.deep", [nested(MAX_DEPTH + 1)], f"nested deeper than {MAX_DEPTH} levels"),
    (b"limits.text", [b"not json"], "PUBLISH body is not valid JSON"),
    (b"limits.retries", [b"retry-count:1000", b"{}"], "PUBLISH header retry-count is above"),
]
#: Events exactly at the bounds: relayed.
GOOD: list[tuple[bytes, bytes]] = [
    (b"limits.at-size", json.dumps("x" * (MAX_BODY - 2)).encode()),
    (b"limits.at-depth", nested(MAX_DEPTH)),
]


@pytest.fixture
def publisher() -> Iterator[tuple[Proc, str, str]]:
    proc = Proc(
        python_module(
            "pubsub", "--incoming", "tcp://127.0.0.1:*", "--outgoing", "tcp://127.0.0.1:*"
        ),
        env={"EMQ_MAX_BODY_BYTES": str(MAX_BODY), "EMQ_MAX_JSON_DEPTH": str(MAX_DEPTH)},
    )
    try:
        ready = proc.wait_output(r"publisher ready: incoming=(\S+) outgoing=(\S+)")
        yield proc, ready.group(1), ready.group(2)
    finally:
        proc.stop()


def publish_frames(sock: zmq.Socket[bytes], msgid: bytes, topic: bytes, rest: list[bytes]) -> None:
    sock.send_multipart([b"", b"eMQP/1.0", b"PUBLISH", msgid, topic, *rest])


def test_publish_bodies_outside_the_limits_are_dropped_and_logged_once(
    publisher: tuple[Proc, str, str],
) -> None:
    proc, incoming, outgoing = publisher
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"limits.")
    sub.connect(outgoing)
    peers = []
    for identity in PEERS:
        peer = ctx.socket(zmq.DEALER)
        peer.setsockopt(zmq.LINGER, 0)
        peer.setsockopt(zmq.IDENTITY, identity)
        peer.connect(incoming)
        peers.append(peer)
    received: list[list[bytes]] = []

    def drain() -> list[bytes]:
        while sub.poll(0):
            received.append(sub.recv_multipart())
        return [frames[0] for frames in received]

    try:

        def subscribed() -> bool:
            publish_frames(peers[0], b"probe", b"limits.probe", [b"{}"])
            return b"limits.probe" in drain()

        wait_for(subscribed, 20, "the SUB socket's subscription")
        for n, peer in enumerate(peers):
            for _ in range(2):  # each twice: logged once per peer and reason
                for topic, rest, _reason in BAD:
                    publish_frames(peer, b"bad", topic, rest)
            for topic, body in GOOD:
                publish_frames(peer, b"good", topic, [body])
            publish_frames(peer, b"marker", b"limits.marker", [str(n).encode()])

        # Each peer's events stay in order, so once both markers arrived every
        # event sent before them has been relayed or dropped.
        wait_for(lambda: drain().count(b"limits.marker") == 2, 20, "both markers")
        topics = [t for t in drain() if t != b"limits.probe"]
        assert sorted(topics) == sorted([t for t, _ in GOOD] * 2 + [b"limits.marker"] * 2)
        at_size = next(f for f in received if f[0] == b"limits.at-size")
        assert len(at_size[1]) == MAX_BODY
        assert proc.popen.poll() is None, proc.output()

        output = proc.output()
        for _topic, _rest, reason in BAD:
            warned = [line for line in output.splitlines() if reason in line]
            assert len(warned) == 2, (reason, warned)  # once per peer
            assert {re.search(r"from (peer-\w)", w).group(1) for w in warned} == {  # type: ignore[union-attr]
                "peer-a",
                "peer-b",
            }
            assert all(line.rstrip().endswith("dropped") for line in warned)
    finally:
        for peer in peers:
            peer.close(linger=0)
        sub.close(linger=0)
    proc.stop()
    stopped = re.search(r"publisher stopped: (\d+) published, (\d+) rejected", proc.output())
    assert stopped is not None, proc.output()
    assert int(stopped.group(2)) == len(BAD) * 2 * len(PEERS)
