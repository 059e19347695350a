"""Publisher, consumers, router and job manager as real processes on loopback.

Absence is checked without waiting for it: a non-matching event is published
first and a matching marker after it on the same path, which keeps order;
once the marker arrived, anything that was going to arrive before it has.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq
from django.urls import reverse

from django_eventmq.pubsub.api import close_publish_clients, publish
from tests.pubsub.conftest import (
    Publisher,
    read_events,
    start_consumer,
    start_publisher,
    wait_events,
    wait_subscribed,
)
from tests.support import Proc, python_module, wait_for


def topics(events: list[dict[str, Any]], handler: str = "on_order") -> list[str]:
    return [e["topic"] for e in events if e["handler"] == handler]


def has_topic(topic: str, handler: str = "on_order") -> Any:
    return lambda events: topic in topics(events, handler)


@pytest.mark.urls("example_project.urls")
@pytest.mark.django_db
def test_event_published_from_a_view_reaches_the_prefix_subscriber(
    events: Path, client: Any, eventmq_settings: Any
) -> None:
    # The management commands; emq_subscribe finds tests/pubsub/subscribers.py
    # by autodiscovery.
    publisher = start_publisher(django=True)
    procs = [publisher.proc]
    try:
        procs.append(start_consumer(publisher.outgoing, events, django=True))
        wait_subscribed(publisher.incoming, events)
        eventmq_settings(PUBLISH_ADDR=publisher.incoming)

        response = client.post(reverse("shop:order"), {"item": "book"})
        assert response.status_code == 302

        found = wait_events(events, has_topic("orders.created", "on_audit"), "orders.created")
        # Both handlers whose prefix matches ("orders." and "orders.created") ran once.
        assert [(e["handler"], e["topic"], e["data"]) for e in found] == [
            ("on_order", "orders.created", {"item": "book"}),
            ("on_audit", "orders.created", {"item": "book"}),
        ]
    finally:
        close_publish_clients()
        for proc in reversed(procs):
            proc.stop()


@pytest.fixture
def job_manager(publisher: Publisher, tmp_path: Path) -> Iterator[str]:
    """A router and a job manager whose jobs publish to ``publisher``; yields the frontend."""
    any_port = "tcp://127.0.0.1:*"
    env = {"EMQ_JOURNAL_PATH": str(tmp_path / "journal.sqlite3")}
    router = Proc(
        python_module("router", "--frontend", any_port, "--backend", any_port, "--admin", any_port),
        env=env,
    )
    procs = [router]
    try:
        ready = router.wait_output(r"router ready: frontend=(\S+) backend=(\S+)")
        frontend, backend = ready.group(1), ready.group(2)
        manager = Proc(
            python_module(
                "jobmanager",
                "--broker",
                backend,
                "--concurrency",
                "1",
                "--job-module",
                "tests.pubsub.jobs",
            ),
            env={**env, "EMQ_PUBLISH_ADDR": publisher.incoming},
        )
        procs.append(manager)
        manager.wait_output(r"jobmanager connected to")
        yield frontend
    finally:
        for proc in reversed(procs):
            proc.stop()


def test_event_published_from_a_job_reaches_the_prefix_subscriber(
    consumer: Proc, job_manager: str, events: Path, eventmq_settings: Any
) -> None:
    from tests.pubsub.jobs import announce

    eventmq_settings(BROKER_ADDR=job_manager)
    announce.delay("payments.settled", {"id": 6})  # matches no prefix
    announce.delay("orders.shipped", {"id": 7})

    found = wait_events(events, has_topic("orders.shipped"), "orders.shipped from the job")
    assert [(e["topic"], e["data"]) for e in found] == [("orders.shipped", {"id": 7})]


def test_only_topics_starting_with_a_subscribed_prefix_are_delivered(
    consumer: Proc, publisher: Publisher, events: Path
) -> None:
    for topic in ("payments.settled", "order.created", "Orders.created", "xorders.created"):
        publish(topic, {"no": topic}, addr=publisher.incoming)
    publish("orders", {"no": "shorter than the prefix"}, addr=publisher.incoming)
    publish("audit.login", {"user": 1}, addr=publisher.incoming)
    publish("orders.marker", {}, addr=publisher.incoming)

    found = wait_events(events, has_topic("orders.marker"), "orders.marker")
    assert [(e["handler"], e["topic"]) for e in found] == [
        ("on_audit", "audit.login"),
        ("on_order", "orders.marker"),
    ]


def test_a_handler_that_raises_is_logged_and_the_consumer_keeps_going(
    consumer: Proc, publisher: Publisher, events: Path
) -> None:
    publish("orders.boom", {}, addr=publisher.incoming)
    publish("orders.after-boom", {}, addr=publisher.incoming)

    wait_events(events, has_topic("orders.after-boom"), "the event after the failing one")
    assert "orders.boom" not in topics(read_events(events))
    output = consumer.output()
    assert "subscriber tests.pubsub.subscribers.on_order failed on topic 'orders.boom'" in output
    assert "this handler fails on purpose" in output
    assert consumer.popen.poll() is None


MALFORMED: list[list[bytes]] = [
    [b"", b"eMQP/1.0"],  # too short
    [b"", b"eMQP/0.9", b"PUBLISH", b"m1", b"orders.x", b"{}"],  # wrong version
    [b"", b"eMQP/1.0", b"PUBLISH", b"m2", b"orders.x"],  # no message frame
    [b"", b"eMQP/1.0", b"PUBLISH", b"m3", b"", b"{}"],  # empty topic
    [b"", b"eMQP/1.0", b"PUBLISH", b"m4", b"orders.\xff", b"{}"],  # not UTF-8
    [b"", b"eMQP/1.0", b"NONSENSE", b"m5"],  # unknown command
    [b"", b"eMQP/1.0", b"DISCONNECT", b"m6"],  # must not stop the publisher
    [b"no-empty-frame"],
]


def test_malformed_input_is_logged_once_and_does_not_kill_the_publisher(
    consumer: Proc, publisher: Publisher, events: Path
) -> None:
    ctx = zmq.Context.instance()
    dealers = []
    try:
        for identity in (b"bad-peer", b"\xff\x00binary"):
            dealer = ctx.socket(zmq.DEALER)
            dealer.setsockopt(zmq.LINGER, 0)
            dealer.setsockopt(zmq.IDENTITY, identity)
            dealer.connect(publisher.incoming)
            dealers.append(dealer)
            for frames in MALFORMED + MALFORMED:  # each twice: warned once
                dealer.send_multipart(frames)
            dealer.send_multipart(
                [
                    b"",
                    b"eMQP/1.0",
                    b"PUBLISH",
                    b"ok",
                    b"orders.valid",
                    json.dumps(identity.hex()).encode(),
                ]
            )

        wait_events(
            events,
            lambda found: topics(found).count("orders.valid") == 2,
            "the valid event after the malformed ones, from both peers",
        )
        assert publisher.proc.popen.poll() is None
        output = publisher.proc.output()
        assert output.count("too short: 2 frame(s)") == 2  # once per peer, not per message
        assert "unexpected command DISCONNECT" in output
        assert "dropped malformed message" in output
    finally:
        for dealer in dealers:
            dealer.close(linger=0)


BURST = 300
PAD = "x" * 32_768  # 300 x 32 KiB: more than the kernel buffers a stuck reader


def test_a_slow_subscriber_does_not_stall_the_publisher(events: Path) -> None:
    """A subscriber that stops reading loses the events that come while its queue is full;
    the publisher goes on serving the others."""
    publisher = start_publisher("--hwm", "20")
    procs = [publisher.proc]
    slow = zmq.Context.instance().socket(zmq.SUB)
    try:
        procs.append(start_consumer(publisher.outgoing, events))
        slow.setsockopt(zmq.LINGER, 0)
        slow.setsockopt(zmq.RCVHWM, 10)
        slow.setsockopt(zmq.RCVBUF, 4096)
        slow.setsockopt(zmq.SUBSCRIBE, b"bulk.")
        slow.connect(publisher.outgoing)
        wait_subscribed(publisher.incoming, events)

        def slow_subscribed() -> bool:
            publish("bulk.probe", {}, addr=publisher.incoming)
            while slow.poll(0):
                if slow.recv_multipart()[0] == b"bulk.probe":
                    return True
            return False

        wait_for(slow_subscribed, 10, "the slow subscriber's subscription")
        while slow.poll(0):  # from here on it reads nothing until the burst is over
            slow.recv_multipart()

        for seq in range(BURST):
            publish("bulk.burst", {"seq": seq, "pad": PAD}, addr=publisher.incoming)

        # The publisher keeps serving the other subscriber: it gets an event
        # published after the burst while the slow one still reads nothing.
        def after_burst_arrived() -> bool:
            publish("orders.after-burst", {}, addr=publisher.incoming)
            return "orders.after-burst" in topics(read_events(events))

        wait_for(after_burst_arrived, 15, "an event after the burst at the fast subscriber")
        fast = [e["data"]["seq"] for e in read_events(events) if e["topic"] == "bulk.burst"]
        assert fast, "the fast subscriber got none of the burst"

        # Now read the slow one until something published after this point arrives.
        got: list[int] = []

        def drained() -> bool:
            publish("bulk.tail", {}, addr=publisher.incoming)
            while slow.poll(0):
                topic, body = slow.recv_multipart()
                if topic == b"bulk.burst":
                    got.append(json.loads(body)["seq"])
                elif topic == b"bulk.tail":
                    return True
            return False

        wait_for(drained, 15, "the slow subscriber to catch up")
        # What it had queued is kept (the oldest event is there, order kept);
        # what came while its queue was full was dropped.
        assert got and got[0] == 0 and got == sorted(got), got
        assert len(got) < BURST, "nothing was dropped: the burst did not fill the queue"
        assert publisher.proc.popen.poll() is None
    finally:
        slow.close(linger=0)
        close_publish_clients()
        for proc in reversed(procs):
            proc.stop()


def stopped_by_sigterm(proc: Proc, deadline: float = 15.0) -> str:
    """SIGTERM ``proc``, wait (up to ``deadline``) for it to exit 0; its output."""
    proc.signal(signal.SIGTERM)
    try:
        code = proc.popen.wait(deadline)
    except subprocess.TimeoutExpired:
        proc.stop(1)
        raise AssertionError(f"{proc.args} still ran {deadline}s after SIGTERM") from None
    output = proc.output()
    assert code == 0, output
    assert "Traceback" not in output
    return output


@pytest.mark.parametrize("django", [False, True], ids=["python -m", "manage.py"])
def test_sigterm_stops_the_publisher_gracefully(events: Path, django: bool) -> None:
    pub = start_publisher(django=django)
    consumer = start_consumer(pub.outgoing, events)
    try:
        wait_subscribed(pub.incoming, events)
        close_publish_clients()
        output = stopped_by_sigterm(pub.proc)
        # The stop line comes after the sockets closed, with what was relayed.
        relayed = re.search(r"publisher stopped: (\d+) published, 0 rejected", output)
        assert relayed is not None and int(relayed.group(1)) >= 1, output
    finally:
        close_publish_clients()
        consumer.stop()
        pub.proc.stop()


@pytest.mark.parametrize("django", [False, True], ids=["python -m", "manage.py"])
def test_sigterm_stops_the_subscriber_gracefully(
    publisher: Publisher, events: Path, django: bool
) -> None:
    consumer = start_consumer(publisher.outgoing, events, django=django)
    try:
        wait_subscribed(publisher.incoming, events)
        output = stopped_by_sigterm(consumer)
        assert re.search(r"subscriber stopped: [1-9]\d* received, 0 rejected", output), output
    finally:
        consumer.stop()
