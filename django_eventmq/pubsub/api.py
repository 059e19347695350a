"""Publish/subscribe: ``publish(topic, data)`` and ``@subscriber(prefix)`` handlers.

``publish()`` sends a PUBLISH to the publisher (``emq_pubsub``) over one
DEALER socket per process and thread, remade after a fork, like the job
client. It sends the 2-frame publisher form ``TOPIC, JSON`` that the
reference's publisher understands too. Nothing comes back: publishing is
fire and forget (see ``docs/pubsub.md`` for what may be dropped).

A :class:`Consumer` (``emq_subscribe``) subscribes to the prefix of every
registered handler; ZeroMQ filters by prefix on the publisher's side, and
the consumer calls each handler whose prefix starts the topic. Never imports
Django: Spark executors and job-manager workers publish with pyzmq alone.

Both sockets speak CURVE to a publisher that requires it when the settings
give this process a key pair and the publisher's public key.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from django_eventmq.errors import BrokerUnavailable, ConfigurationError, InvalidJob
from django_eventmq.protocol import Publish, decode_json, encode_json, new_msgid
from django_eventmq.protocol.frame_fields import published_fields
from django_eventmq.runtime import security, transport
from django_eventmq.runtime.config import get_settings
from django_eventmq.runtime.outbox import WarnOnce
from django_eventmq.runtime.service import Service
from django_eventmq.runtime.settings import Settings
from django_eventmq.runtime.transport import Channel

log = logging.getLogger("django_eventmq.pubsub")

#: Messages ``publish()`` may queue in its socket (e.g. while the publisher
#: restarts) before it waits up to ``SEND_TIMEOUT`` and raises.
PUBLISH_SNDHWM = 100_000
#: Messages a consumer buffers before the publisher drops new ones for it.
CONSUMER_RCVHWM = 10_000
#: Messages handled per wake-up before polling again (keeps stop() responsive).
DRAIN_CAP = 256

Handler = Callable[[str, Any], object]
H = TypeVar("H", bound=Handler)


# -- subscriber registry -------------------------------------------------------


@dataclass(frozen=True)
class Subscription:
    """One ``@subscriber(prefix)`` registration."""

    prefix: str
    handler: Handler
    name: str

    def matches(self, topic: str) -> bool:
        return topic.startswith(self.prefix)


_lock = threading.Lock()
_subscriptions: dict[tuple[str, str], Subscription] = {}


def subscriber(prefix: str) -> Callable[[H], H]:
    """Run the decorated ``handler(topic, data)`` for every event whose topic starts with
    ``prefix`` (in ``emq_subscribe``). ``""`` matches every topic.

    The function is returned unchanged; decorate it again to add prefixes.
    """
    if not isinstance(prefix, str):
        raise ConfigurationError(f"@subscriber prefix must be a string, got {prefix!r}")

    def decorate(handler: H) -> H:
        name = f"{getattr(handler, '__module__', '?')}.{getattr(handler, '__qualname__', handler)}"
        with _lock:
            # Keyed by name: importing a module twice does not run a handler twice.
            _subscriptions[(prefix, name)] = Subscription(prefix, handler, name)
        return handler

    return decorate


def subscriptions() -> list[Subscription]:
    """Every registered subscription, in registration order."""
    with _lock:
        return list(_subscriptions.values())


def remove_subscriber(handler: Handler) -> int:
    """Forget every registration of ``handler`` (tests); returns how many."""
    with _lock:
        keys = [key for key, sub in _subscriptions.items() if sub.handler is handler]
        for key in keys:
            del _subscriptions[key]
    return len(keys)


def import_subscriber_modules(modules: Iterable[str]) -> list[str]:
    """Import modules so their ``@subscriber`` handlers register; returns their names."""
    done = []
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigurationError(
                f"subscriber module {module!r} could not be imported: {exc}"
            ) from exc
        done.append(module)
    return done


def dispatch(topic: str, data: Any, subs: Iterable[Subscription] | None = None) -> int:
    """Call each handler whose prefix matches ``topic`` (once, even if several
    of its prefixes match); returns how many ran without raising.

    A handler that raises is logged and the others still run.
    """
    done = 0
    called: set[int] = set()
    for sub in subscriptions() if subs is None else subs:
        if not sub.matches(topic) or id(sub.handler) in called:
            continue
        called.add(id(sub.handler))
        try:
            sub.handler(topic, data)
        except Exception:
            log.exception("subscriber %s failed on topic %r", sub.name, topic)
        else:
            done += 1
    return done


# -- publishing ----------------------------------------------------------------


class PublishClient:
    """A DEALER connected to a publisher's incoming address.

    It has a ZeroMQ context of its own, so :meth:`close` can wait for unsent
    events (terminating a context is what honours linger; the process-wide
    one is shared with sockets that must stay open).
    """

    def __init__(
        self,
        addr: str,
        *,
        send_timeout: float = 5.0,
        options: Mapping[int, Any] | None = None,
    ) -> None:
        """Connect to ``addr``; ``options`` are extra socket options (CURVE keys)."""
        self.addr = addr
        self._ctx = transport.Context()
        try:
            self.channel = Channel(
                transport.DEALER,
                connect=addr,
                hwm=PUBLISH_SNDHWM,
                options={transport.SNDTIMEO: int(send_timeout * 1000), **(options or {})},
                ctx=self._ctx,
            )
        except BaseException:
            self._ctx.term()
            raise

    def send(self, message: Publish) -> str:
        """Hand ``message`` to the socket; returns its msgid."""
        try:
            self.channel.send(message)
        except transport.Again:
            raise BrokerUnavailable(
                f"the publisher at {self.addr} is not taking messages (is emq_pubsub running?)"
            ) from None
        return message.msgid

    def close(self, linger: float = 0.0) -> None:
        """Close the socket, first waiting up to ``linger`` seconds for unsent messages."""
        if linger > 0:
            self.channel.socket.close(linger=int(linger * 1000))
        else:
            self.channel.close()
        self._ctx.term()  # returns once the socket's messages are out or linger ran out


_local = threading.local()


def get_publish_client(addr: str, *, send_timeout: float = 5.0) -> PublishClient:
    """This thread's publish client for ``addr`` (a new one after fork)."""
    clients: dict[str, PublishClient] | None = getattr(_local, "clients", None)
    pid = os.getpid()
    if clients is None or getattr(_local, "pid", None) != pid:
        # After fork the inherited sockets belong to the parent: forget them.
        clients = _local.clients = {}
        _local.pid = pid
    client = clients.get(addr)
    if client is None:
        options = security.secure_channel_options(
            get_settings(), security.PUBLISHER, security.CLIENT
        )
        client = clients[addr] = PublishClient(addr, send_timeout=send_timeout, options=options)
    return client


def close_publish_clients(linger: float = 0.0) -> None:
    """Close this thread's publish sockets (tests, shutdown).

    Sockets drop unsent messages when closed: a short-lived process (a
    script, a command) passes ``linger`` to let its last events go out first.
    """
    clients: dict[str, PublishClient] = getattr(_local, "clients", None) or {}
    if getattr(_local, "pid", None) == os.getpid():
        for client in clients.values():
            client.close(linger)
    _local.clients = {}


def publish(topic: str, data: Any = None, *, addr: str | None = None) -> str:
    """Publish ``data`` (JSON-serialisable) on ``topic``; returns the msgid.

    Goes to ``PUBLISH_ADDR`` (or ``addr``). With ``EAGER`` or an empty
    address the matching handlers of this process run inline instead.
    Raises :class:`SerializationError` for data that is not JSON and
    :class:`BrokerUnavailable` when the socket stays full for ``SEND_TIMEOUT``.
    """
    message = Publish(msgid=new_msgid(), topic=topic, body_text=encode_json(data))
    settings = get_settings()
    target = settings.publish_addr if addr is None else addr
    if settings.eager or not target:
        # Through JSON, so handlers see what they would see from a consumer.
        dispatch(topic, json.loads(message.body_text))
        return message.msgid
    return get_publish_client(target, send_timeout=settings.send_timeout).send(message)


# -- consuming -----------------------------------------------------------------


class Consumer(Service):
    """Subscribes to every registered prefix and runs the matching handlers."""

    label = "subscriber"
    log = log

    def __init__(
        self,
        settings: Settings,
        *,
        subs: Iterable[Subscription] | None = None,
        hwm: int = CONSUMER_RCVHWM,
        around: Callable[[], object] | None = None,
    ) -> None:
        super().__init__()
        self.settings = settings
        self.subs = list(subscriptions() if subs is None else subs)
        if not self.subs:
            raise ConfigurationError(
                "no @subscriber handlers are registered: put them in a 'subscribers' module "
                "of an installed app, or name their module with --subscriber-module"
            )
        self.prefixes = sorted({sub.prefix for sub in self.subs})
        self.hwm = hwm
        #: Called before and after each message (Django: close stale DB connections).
        self.around = around
        #: Messages handled and messages dropped as malformed.
        self.received = 0
        self.rejected = 0
        self._warn = WarnOnce(log)
        self._channel: Channel | None = None

    def start(self) -> None:
        """Connect and subscribe (in the calling thread); logs the ready line."""
        if self._channel is not None:
            return
        channel = Channel(
            transport.SUB,
            connect=self.settings.subscribe_addr,
            hwm=self.hwm,
            options=security.secure_channel_options(
                self.settings, security.PUBLISHER, security.CLIENT
            ),
        )
        try:
            for prefix in self.prefixes:
                channel.socket.setsockopt(transport.SUBSCRIBE, prefix.encode())
        except BaseException:
            channel.close()
            raise
        self._channel = channel
        log.info(
            "subscriber ready: addr=%s prefixes=%s handlers=%d",
            channel.address,
            ",".join(repr(p) for p in self.prefixes),
            len(self.subs),
        )

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def summary(self) -> str:
        return f": {self.received} received, {self.rejected} rejected"

    def loop_once(self, timeout_ms: int = 100) -> int:
        """Wait up to ``timeout_ms`` and handle the messages ready; returns how many."""
        if self._channel is None:
            self.start()
        channel = self._channel
        assert channel is not None
        if not channel.poll(timeout_ms):
            return 0
        handled = 0
        for _ in range(DRAIN_CAP):
            if self._stopping:
                break
            try:
                frames = channel.recv_frames(flags=transport.NOBLOCK)
            except transport.Again:
                break
            handled += self.handle(frames)
        return handled

    def handle(self, frames: list[bytes]) -> int:
        """Decode ``[TOPIC, JSON]`` and run the matching handlers; 0 if it was malformed."""
        fields = published_fields(frames)
        if fields is None:
            return self._reject(f"expected 2 frames [topic, message], got {len(frames)}")
        topic_b, data_b = fields
        try:
            topic = topic_b.decode()
        except UnicodeDecodeError:
            return self._reject("topic is not valid UTF-8")
        try:
            data = decode_json(data_b, f"message on {topic!r}")
        except InvalidJob as exc:
            return self._reject(str(exc))
        self.received += 1
        if self.around is not None:
            self.around()
        try:
            dispatch(topic, data, self.subs)
        finally:
            if self.around is not None:
                self.around()
        return 1

    def _reject(self, reason: str) -> int:
        self.rejected += 1
        self._warn("subscriber", b"", reason, "dropped")
        return 0
