"""The publisher core, publish() and the consumer in this process, on real loopback sockets.

The publisher and the consumer are driven one ``loop_once`` at a time.
"""

from __future__ import annotations

import logging
import multiprocessing
from collections.abc import Iterator
from typing import Any

import pytest
import zmq

from django_eventmq import publish as lazy_publish
from django_eventmq import subscriber as lazy_subscriber
from django_eventmq.__main__ import main
from django_eventmq.errors import ConfigurationError, ProtocolError, SerializationError
from django_eventmq.pubsub.api import (
    Consumer,
    Subscription,
    close_publish_clients,
    dispatch,
    get_publish_client,
    import_subscriber_modules,
    publish,
    remove_subscriber,
    subscriber,
    subscriptions,
)
from django_eventmq.pubsub.publisher import Publisher
from django_eventmq.runtime.settings import Settings, from_mapping
from tests.support import wait_for

LOOPBACK = "tcp://127.0.0.1:*"
PROBE = b"orders.probe"


@pytest.fixture
def publisher() -> Iterator[Publisher]:
    pub = Publisher(
        Settings(publisher_incoming_addr=LOOPBACK, publisher_outgoing_addr=LOOPBACK), hwm=1000
    )
    pub.start()
    try:
        yield pub
    finally:
        close_publish_clients()
        pub.close()


@pytest.fixture
def sub_socket(publisher: Publisher) -> Iterator[zmq.Socket[bytes]]:
    """A raw SUB subscribed to ``orders.``, as a subscriber written for the reference is."""
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.SUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SUBSCRIBE, b"orders.")
    sock.connect(publisher.outgoing_address)
    try:
        yield sock
    finally:
        sock.close(linger=0)


def until_subscribed(publisher: Publisher, sock: zmq.Socket[bytes]) -> None:
    """Publish probes until ``sock`` receives one (its subscription has reached the PUB)."""

    def arrived() -> bool:
        publish(PROBE.decode(), None, addr=publisher.incoming_address)
        publisher.loop_once(10)
        found = False
        while sock.poll(0):
            found |= sock.recv_multipart()[0] == PROBE
        return found

    wait_for(arrived, 10, "the SUB socket's subscription")


def relay_until(publisher: Publisher, sock: zmq.Socket[bytes], count: int) -> list[list[bytes]]:
    """Run the publisher until ``sock`` received ``count`` messages (late probes left
    out); return them."""
    got: list[list[bytes]] = []

    def enough() -> bool:
        publisher.loop_once(10)
        while sock.poll(0):
            frames = sock.recv_multipart()
            if frames[0] != PROBE:
                got.append(frames)
        return len(got) >= count

    wait_for(enough, 10, f"{count} message(s) at the subscriber")
    return got


def test_outgoing_frames_are_topic_then_message_and_zeromq_filters_by_prefix(
    publisher: Publisher, sub_socket: zmq.Socket[bytes]
) -> None:
    until_subscribed(publisher, sub_socket)
    addr = publisher.incoming_address
    publish("payments.done", {"n": 0}, addr=addr)
    publish("orders.created", {"n": 1}, addr=addr)
    publish("order.created", {"n": 2}, addr=addr)
    publish("orders.shipped", [1, "two"], addr=addr)

    got = relay_until(publisher, sub_socket, 2)
    assert got == [[b"orders.created", b'{"n":1}'], [b"orders.shipped", b'[1,"two"]']]


def test_both_publish_forms_are_accepted_and_headers_are_not_forwarded(
    publisher: Publisher, sub_socket: zmq.Socket[bytes]
) -> None:
    until_subscribed(publisher, sub_socket)
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(publisher.incoming_address)
    try:
        # Publisher form (spec, reference client) and client form (spec, with headers).
        dealer.send_multipart([b"", b"eMQP/1.0", b"PUBLISH", b"m1", b"orders.a", b'{"f":2}'])
        dealer.send_multipart([b"", b"eMQP/1.0", b"PUBLISH", b"m2", b"orders.b", b"", b'{"f":3}'])
        got = relay_until(publisher, sub_socket, 2)
    finally:
        dealer.close(linger=0)
    assert got == [[b"orders.a", b'{"f":2}'], [b"orders.b", b'{"f":3}']]


def test_malformed_input_is_logged_once_per_peer_and_reason_and_dropped(
    publisher: Publisher, sub_socket: zmq.Socket[bytes], caplog: pytest.LogCaptureFixture
) -> None:
    until_subscribed(publisher, sub_socket)
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.setsockopt(zmq.IDENTITY, b"sloppy")
    dealer.connect(publisher.incoming_address)
    caplog.set_level(logging.DEBUG, "django_eventmq.publisher")
    try:
        for _ in range(3):
            dealer.send_multipart([b"", b"eMQP/1.0", b"PUBLISH", b"m1", b"orders.a"])
            dealer.send_multipart([b"", b"eMQP/1.0", b"HEARTBEAT", b"m2", b"123.0"])
        dealer.send_multipart([b"", b"eMQP/1.0", b"PUBLISH", b"m3", b"orders.ok", b"{}"])
        got = relay_until(publisher, sub_socket, 1)
    finally:
        dealer.close(linger=0)
    assert got == [[b"orders.ok", b"{}"]]
    assert publisher.rejected == 6
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "incoming: PUBLISH: expected 2 to 3 frame(s) after the msgid, got 1 from sloppy; "
        "dropped malformed message",
        "incoming: unexpected command HEARTBEAT from sloppy; ignored",
    ]


def test_publisher_logs_its_ready_line_with_the_bound_addresses(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "django_eventmq.publisher")
    pub = Publisher(Settings(publisher_incoming_addr=LOOPBACK, publisher_outgoing_addr=LOOPBACK))
    pub.stop()
    pub.run()  # starts, sees the stop flag, closes
    ready = [r.getMessage() for r in caplog.records if "publisher ready" in r.getMessage()]
    assert ready == [
        f"publisher ready: incoming={pub.incoming_address} outgoing={pub.outgoing_address}"
    ]
    assert not pub.incoming_address.endswith(":*")


def _publish_in_child(addr: str) -> None:
    publish("orders.from-child", {"child": True}, addr=addr)
    # Sockets have linger=0: a process about to exit lets its last events go out.
    close_publish_clients(linger=10)


# The parent has ZeroMQ threads; the child only uses sockets it made itself.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_publish_makes_a_new_socket_after_fork_and_can_linger_before_exit(
    publisher: Publisher, sub_socket: zmq.Socket[bytes]
) -> None:
    until_subscribed(publisher, sub_socket)
    parent_client = get_publish_client(publisher.incoming_address)
    child = multiprocessing.get_context("fork").Process(
        target=_publish_in_child, args=(publisher.incoming_address,)
    )
    child.start()
    try:
        got = relay_until(publisher, sub_socket, 1)
    finally:
        child.join(10)
    assert child.exitcode == 0
    assert got == [[b"orders.from-child", b'{"child":true}']]
    assert get_publish_client(publisher.incoming_address) is parent_client


def test_publish_refuses_what_it_cannot_send() -> None:
    with pytest.raises(SerializationError):
        publish("orders.x", {"when": object()}, addr="tcp://127.0.0.1:1")
    with pytest.raises(ProtocolError, match="topic is empty"):
        publish("", {}, addr="tcp://127.0.0.1:1")


# -- registry, dispatch and the consumer ---------------------------------------


@pytest.fixture
def calls() -> Iterator[list[tuple[str, str, Any]]]:
    """Handlers registered for one test (and removed after it) append to this list."""
    seen: list[tuple[str, str, Any]] = []

    @subscriber("orders.")
    @subscriber("orders.created")  # overlaps: still one call per event
    def orders(topic: str, data: Any) -> None:
        seen.append(("orders", topic, data))

    @subscriber("")
    def everything(topic: str, data: Any) -> None:
        if topic == "orders.bad":
            raise ValueError("bad order")
        seen.append(("everything", topic, data))

    yield seen
    remove_subscriber(orders)
    remove_subscriber(everything)


def test_subscriber_registers_and_returns_the_function(calls: list[Any]) -> None:
    assert lazy_subscriber is subscriber and lazy_publish is publish
    registered = {(s.prefix, s.name.rsplit(".", 1)[-1]) for s in subscriptions()}
    assert {("orders.", "orders"), ("orders.created", "orders"), ("", "everything")} <= registered
    with pytest.raises(ConfigurationError, match="prefix must be a string"):
        subscriber(b"orders.")  # type: ignore[arg-type]


def test_dispatch_runs_each_matching_handler_once_and_survives_one_that_raises(
    calls: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    assert dispatch("orders.created", {"n": 1}) == 2
    assert dispatch("payments.done", None) == 1
    assert dispatch("orders.bad", None) == 1  # "everything" raised, "orders" still ran
    assert calls == [
        ("orders", "orders.created", {"n": 1}),
        ("everything", "orders.created", {"n": 1}),
        ("everything", "payments.done", None),
        ("orders", "orders.bad", None),
    ]
    assert "failed on topic 'orders.bad'" in caplog.text
    assert "bad order" in caplog.text


def test_publish_with_eager_runs_the_handlers_inline(calls: list[Any], eventmq_settings: Any):
    eventmq_settings(EAGER=True)
    publish("orders.created", ("a", 1))
    assert calls == [
        ("orders", "orders.created", ["a", 1]),  # through JSON, as a consumer would see it
        ("everything", "orders.created", ["a", 1]),
    ]


def test_consumer_subscribes_to_each_prefix_and_drops_malformed_messages(
    publisher: Publisher, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[tuple[str, Any]] = []
    subs = [
        Subscription("orders.", lambda t, d: seen.append((t, d)), "orders"),
        Subscription("audit.", lambda t, d: seen.append((t, d)), "audit"),
    ]
    consumer = Consumer(Settings(subscribe_addr=publisher.outgoing_address), subs=subs)
    assert consumer.prefixes == ["audit.", "orders."]
    consumer.start()
    try:
        # Malformed messages, handed in as the SUB socket would.
        assert consumer.handle([b"orders.x"]) == 0
        assert consumer.handle([b"orders.x", b"not json"]) == 0
        assert consumer.handle([b"orders.\xff", b"{}"]) == 0
        assert consumer.rejected == 3
        assert "expected 2 frames [topic, message], got 1" in caplog.text

        def delivered() -> bool:
            publish("payments.x", 0, addr=publisher.incoming_address)
            publish("audit.login", 1, addr=publisher.incoming_address)
            publisher.loop_once(10)
            consumer.loop_once(10)
            return any(topic == "audit.login" for topic, _ in seen)

        wait_for(delivered, 10, "audit.login at the consumer")
        assert {topic for topic, _ in seen} == {"audit.login"}
    finally:
        consumer.close()


def test_consumer_without_handlers_says_where_to_put_them() -> None:
    with pytest.raises(ConfigurationError, match="'subscribers' module"):
        Consumer(Settings(), subs=[])
    with pytest.raises(ConfigurationError, match="subscriber module 'no_such_mod' could not"):
        import_subscriber_modules(["no_such_mod"])


# -- settings and command line --------------------------------------------------


def test_settings_have_the_reference_default_ports_and_are_validated() -> None:
    s = Settings()
    assert s.publisher_incoming_addr == s.publish_addr == "tcp://127.0.0.1:47298"
    assert s.publisher_outgoing_addr == s.subscribe_addr == "tcp://127.0.0.1:47299"
    assert Settings(publish_addr="").publish_addr == ""  # no publisher: handlers run inline
    for field in ("publisher_incoming_addr", "publisher_outgoing_addr", "subscribe_addr"):
        with pytest.raises(ConfigurationError, match=field.upper()):
            Settings(**{field: "localhost:1"})
    with pytest.raises(ConfigurationError, match="PUBLISH_ADDR"):
        Settings(publish_addr="nowhere")
    env = from_mapping({}, environ={"EMQ_SUBSCRIBE_ADDR": "ipc:///tmp/emq-pub.sock"})
    assert env.subscribe_addr == "ipc:///tmp/emq-pub.sock"


def test_command_line_refuses_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["pubsub", "--incoming", "localhost:1"])
    assert exit_info.value.code == 2
    assert "is not a ZeroMQ address" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["pubsub", "--hwm", "0"])
    assert "expected a whole number >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["subscribe", "--subscriber-module", "not a module"])
    assert "is not a dotted module path" in capsys.readouterr().err
