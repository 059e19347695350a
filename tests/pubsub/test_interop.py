"""Publish/subscribe against the reference eventmq 0.3.13 (``emq-pubsub`` and its client).

Verified directions:

- the reference client (``Sender`` + ``send_publish_request``) -> OUR publisher
  -> our consumer;
- OUR ``publish()`` -> the REFERENCE publisher (``emq-pubsub``) -> our consumer;
- the same ``publish()`` through either publisher gives a plain SUB the same
  frames, ``[TOPIC, JSON]`` (the reference has no subscriber program to run:
  its ``subscriber.py`` is a hard-coded demo).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from django_eventmq.pubsub.api import close_publish_clients, publish
from tests.pubsub.conftest import Publisher, start_consumer, wait_events, wait_subscribed
from tests.support import Proc, tcp_addr, wait_for

pytestmark = [
    pytest.mark.interop,
    pytest.mark.skipif(
        importlib.util.find_spec("eventmq") is None,
        reason="the reference eventmq 0.3.13 is not installed",
    ),
]

REF_PUBSUB = Path(sys.executable).parent / "emq-pubsub"


@pytest.fixture
def reference_publisher(tmp_path: Path) -> Iterator[Publisher]:
    """The reference's ``emq-pubsub`` on free ports (it reads the [publisher] section)."""
    incoming, outgoing = tcp_addr(), tcp_addr()
    conf = tmp_path / "pubsub.conf"
    conf.write_text(
        f"[publisher]\nPUBLISHER_INCOMING_ADDR={incoming}\nPUBLISHER_OUTGOING_ADDR={outgoing}\n"
    )
    proc = Proc([str(REF_PUBSUB)], env={"EVENTMQ_CONFIG_FILE": str(conf)})
    try:
        proc.wait_output(r"Listening for subscribers on")
        yield Publisher(proc, incoming, outgoing)
    finally:
        close_publish_clients()
        proc.stop()


def test_reference_client_publishes_through_our_publisher(
    consumer: Proc, publisher: Publisher, events: Path
) -> None:
    done = Proc(
        [
            sys.executable,
            "-m",
            "tests.pubsub.reference_publish",
            "--addr",
            publisher.incoming,
            "--topic",
            "orders.from-reference",
            "--data",
            json.dumps({"sku": "A-1", "qty": 2}),
        ]
    )
    try:
        done.popen.wait(30)
        output = done.output()
    finally:
        code = done.stop()
    assert code == 0 and '{"sent": ' in output, output

    found = wait_events(
        events,
        lambda found: any(e["topic"] == "orders.from-reference" for e in found),
        "the reference client's event",
    )
    assert [(e["topic"], e["data"]) for e in found] == [
        ("orders.from-reference", {"sku": "A-1", "qty": 2})
    ]


def test_our_publish_goes_through_the_reference_publisher(
    reference_publisher: Publisher, events: Path
) -> None:
    consumer = start_consumer(reference_publisher.outgoing, events)
    try:
        wait_subscribed(reference_publisher.incoming, events)
        publish("payments.settled", {"id": 1}, addr=reference_publisher.incoming)
        publish("orders.created", {"id": 2}, addr=reference_publisher.incoming)

        found = wait_events(
            events,
            lambda found: any(e["handler"] == "on_audit" for e in found),
            "orders.created through the reference publisher",
        )
        assert [(e["handler"], e["topic"], e["data"]) for e in found] == [
            ("on_order", "orders.created", {"id": 2}),
            ("on_audit", "orders.created", {"id": 2}),
        ]
        assert reference_publisher.proc.popen.poll() is None
    finally:
        consumer.stop()


def _frames_through(pub: Publisher) -> list[bytes]:
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.SUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SUBSCRIBE, b"orders.")
    sock.connect(pub.outgoing)
    try:

        def received() -> list[bytes] | None:
            publish("orders.same", {"n": [1, 2], "s": "é"}, addr=pub.incoming)
            return sock.recv_multipart() if sock.poll(10) else None

        frames: list[bytes] = wait_for(received, 10, f"an event through {pub.incoming}")
        return frames
    finally:
        sock.close(linger=0)


def test_both_publishers_send_subscribers_the_same_frames(
    publisher: Publisher, reference_publisher: Publisher
) -> None:
    ours, theirs = _frames_through(publisher), _frames_through(reference_publisher)
    assert ours == theirs == [b"orders.same", b'{"n":[1,2],"s":"\\u00e9"}']
