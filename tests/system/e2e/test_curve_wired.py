"""The components' own sockets with CURVE: a keyed peer gets through, others get nothing.

A router and a publisher run in threads of this process with a server key;
peers are built exactly as the package builds them (``get_client``,
``publish()``, :class:`Scheduler`, :class:`Consumer`) from settings with the
right key pair, a stranger's key pair, or none. "Gets nothing" is a wait with a
deadline that must run out (the condition being tested).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from django_eventmq.client.pool import close_clients, get_client
from django_eventmq.errors import BrokerUnavailable, ConfigurationError
from django_eventmq.protocol import Headers, JobBody, Publish, new_msgid
from django_eventmq.pubsub.api import (
    Consumer,
    PublishClient,
    Subscription,
    close_publish_clients,
    publish,
)
from django_eventmq.pubsub.publisher import Publisher
from django_eventmq.router.router import Router
from django_eventmq.runtime import config, security
from django_eventmq.runtime.settings import Settings, from_mapping
from django_eventmq.scheduling.scheduler import Scheduler
from tests.keys import Keys
from tests.scheduling.fakes import MemoryStore
from tests.support import wait_for

#: How long a peer that must get nothing is given to get something anyway.
NEVER_DEADLINE = 1.5
ANY = "tcp://127.0.0.1:*"


def _serving(
    target: Callable[[], None], ready: Callable[[], object], what: str
) -> threading.Thread:
    thread = threading.Thread(target=target, name=what, daemon=True)
    thread.start()
    wait_for(ready, 10, what)
    return thread


@pytest.fixture
def router(keys: Keys) -> Iterator[Router]:
    settings = keys.server_settings(
        frontend_addr=ANY, backend_addr=ANY, admin_addr=ANY, journal=False
    )
    r = Router(settings)
    thread = _serving(r.run, lambda: r.admin_address, "the router to bind")
    try:
        yield r
    finally:
        r.stop()
        thread.join(10)
        assert not thread.is_alive()


@pytest.fixture
def publisher(keys: Keys) -> Iterator[Publisher]:
    settings = keys.server_settings(publisher_incoming_addr=ANY, publisher_outgoing_addr=ANY)
    p = Publisher(settings)
    thread = _serving(p.run, lambda: p.outgoing_address, "the publisher to bind")
    try:
        yield p
    finally:
        p.stop()
        thread.join(10)
        assert not thread.is_alive()


def _peer(keys: Keys, pair: tuple[str, str] | None, **addrs: str) -> Settings:
    base = keys.peer_settings(pair) if pair is not None else from_mapping(environ={})
    return base.replace(**addrs)


def _use(monkeypatch: pytest.MonkeyPatch, keys: Keys, pair: tuple[str, str] | None) -> None:
    """Make ``pair`` (or no key) this process's client key pair, from ``EMQ_*``."""
    close_clients()
    close_publish_clients()
    if pair is None:
        monkeypatch.delenv("EMQ_CURVE_SERVER_PUBLIC_KEY", raising=False)
        monkeypatch.delenv("EMQ_CURVE_CLIENT_SECRET_KEY", raising=False)
    else:
        monkeypatch.setenv("EMQ_CURVE_SERVER_PUBLIC_KEY", keys.server[0])
        monkeypatch.setenv("EMQ_CURVE_CLIENT_SECRET_KEY", pair[1])
    config.reset()


# -- the job client ------------------------------------------------------------------


def _send_guaranteed(addr: str, ack_timeout: float) -> None:
    body = JobBody(path="tests.jobs_fixtures.sample", callable="noop").encode()
    get_client(addr, send_timeout=NEVER_DEADLINE).send_request_guaranteed(
        new_msgid().encode(),
        b"default",
        Headers(guarantee=True).encode().encode(),
        body.encode(),
        ack_timeout=ack_timeout,
        retries=0,
    )


def test_get_client_with_the_client_key_is_acknowledged(
    keys: Keys, router: Router, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(monkeypatch, keys, keys.client)
    _send_guaranteed(router.frontend_address, ack_timeout=10)


@pytest.mark.parametrize("who", ["no key", "a stranger's key", "a job manager's key"])
def test_get_client_without_the_client_key_gets_no_ack(
    keys: Keys, router: Router, monkeypatch: pytest.MonkeyPatch, who: str
) -> None:
    pair = {"no key": None, "a stranger's key": keys.stranger, "a job manager's key": keys.worker}
    _use(monkeypatch, keys, pair[who])
    # The handshake fails, so there is never a router to queue for; the error
    # says which keys to check.
    hint = "does it not require CURVE" if pair[who] is None else "in its CURVE_FRONTEND_CLIENTS"
    with pytest.raises(BrokerUnavailable, match=hint):
        _send_guaranteed(router.frontend_address, ack_timeout=NEVER_DEADLINE)


# -- the scheduler -------------------------------------------------------------------


def _scheduler(settings: Settings) -> Scheduler:
    return Scheduler(settings, MemoryStore(), poll_interval=0.05)


def test_scheduler_with_the_client_key_registers_and_others_never_do(
    keys: Keys, router: Router
) -> None:
    addr = router.frontend_address
    keyed = _scheduler(_peer(keys, keys.client, broker_addr=addr))
    others = [
        _scheduler(_peer(keys, None, broker_addr=addr)),
        _scheduler(_peer(keys, keys.stranger, broker_addr=addr)),
    ]
    try:

        def tick(scheduler: Scheduler) -> bool:
            scheduler.loop_once(timeout=0.02)
            return scheduler.connected

        wait_for(lambda: tick(keyed), 10, "the keyed scheduler's INFORM to be ACKed")
        with pytest.raises(AssertionError, match="timed out"):
            wait_for(lambda: any([tick(s) for s in others]), NEVER_DEADLINE, "an ACK")
        assert tick(keyed)  # still registered: the router is up
    finally:
        for scheduler in (keyed, *others):
            scheduler.close()


# -- publish / subscribe ---------------------------------------------------------------


class _Seen:
    """A subscriber handler that keeps the topics it was called with."""

    def __init__(self) -> None:
        self.topics: list[str] = []

    def __call__(self, topic: str, _data: Any) -> None:
        self.topics.append(topic)

    def consumer(self, settings: Settings) -> Consumer:
        return Consumer(settings, subs=[Subscription("t.", self, "seen")])


def test_keyed_consumer_receives_and_unkeyed_ones_get_nothing(
    keys: Keys, publisher: Publisher, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(monkeypatch, keys, keys.client)
    out = publisher.outgoing_address
    keyed, unkeyed, stranger = _Seen(), _Seen(), _Seen()
    consumers = [
        keyed.consumer(_peer(keys, keys.client, subscribe_addr=out)),
        unkeyed.consumer(_peer(keys, None, subscribe_addr=out)),
        stranger.consumer(_peer(keys, keys.stranger, subscribe_addr=out)),
    ]
    try:

        def tick() -> list[str]:
            publish("t.event", {"n": 1}, addr=publisher.incoming_address)
            for consumer in consumers:
                consumer.loop_once(20)
            return keyed.topics

        wait_for(tick, 10, "the keyed consumer to receive an event")
        with pytest.raises(AssertionError, match="timed out"):
            wait_for(lambda: (tick(), unkeyed.topics + stranger.topics)[1], NEVER_DEADLINE, "x")
        assert len(keyed.topics) > 1  # events kept flowing to the keyed one meanwhile
    finally:
        for consumer in consumers:
            consumer.close()


def test_events_from_an_unkeyed_publisher_never_arrive(
    keys: Keys, publisher: Publisher, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _Seen()
    consumer = seen.consumer(_peer(keys, keys.client, subscribe_addr=publisher.outgoing_address))
    incoming = publisher.incoming_address
    # Built as get_publish_client builds them, and kept open while we watch:
    # a closed socket would drop its events anyway, proving nothing.
    strangers = [
        PublishClient(
            incoming,
            send_timeout=0.05,
            options=security.secure_channel_options(
                _peer(keys, pair), security.PUBLISHER, security.CLIENT
            ),
        )
        for pair in (None, keys.stranger, keys.worker)
    ]
    _use(monkeypatch, keys, keys.client)
    try:

        def tick() -> list[str]:
            for stranger in strangers:
                with contextlib.suppress(BrokerUnavailable):  # no peer to queue for
                    stranger.send(Publish(msgid=new_msgid(), topic="t.unkeyed", body_text="1"))
            publish("t.keyed", None, addr=incoming)
            consumer.loop_once(20)
            return seen.topics

        wait_for(lambda: "t.keyed" in tick(), 10, "a keyed event to arrive")
        with pytest.raises(AssertionError, match="timed out"):
            wait_for(lambda: "t.unkeyed" in tick(), NEVER_DEADLINE, "an unkeyed event")
        assert set(seen.topics) == {"t.keyed"}
    finally:
        consumer.close()
        for stranger in strangers:
            stranger.close()


def test_a_publisher_with_a_key_but_no_client_keys_refuses_to_start(keys: Keys) -> None:
    settings = from_mapping(
        {"CURVE_SERVER_SECRET_KEY": keys.server[1], "PUBLISHER_INCOMING_ADDR": ANY},
        environ={},
    )
    p = Publisher(settings)
    with pytest.raises(ConfigurationError, match="CURVE_FRONTEND_CLIENTS is empty"):
        p.start()
    p.close()  # idempotent after a failed start
