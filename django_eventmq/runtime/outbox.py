"""The router's sending policy and its warn-once log.

Sends never block: ROUTER_MANDATORY is on, so a peer whose pipe is full
raises ``Again`` and a peer that is gone raises ``EHOSTUNREACH``. Either
costs that one message (logged at debug), never the router.
"""

from __future__ import annotations

import logging
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from typing import Any

from django_eventmq.protocol import Message, encode
from django_eventmq.protocol.frame_fields import identity_of
from django_eventmq.runtime import transport
from django_eventmq.runtime.transport import Channel

log = logging.getLogger("django_eventmq.router")

#: How many "already warned" keys are remembered.
MEMORY = 4096

#: Messages ZeroMQ queues for one client before a send to it raises ``Again``; the
#: rest waits in the router's :class:`Outbox`, where it is counted (ZeroMQ's queue
#: is not: a few hundred bytes per ACK, so this bounds it well under 1 MiB per client).
CLIENT_SNDHWM = 1000
#: Bytes counted per queued frame besides its data (the Python objects holding it).
FRAME_COST = 64

#: A message handler: ``(identity, frames without identity, decoded message, now)``.
Handler = Callable[[bytes, list[bytes], Message, float], None]


def show(identity: bytes) -> str:
    """A routing identity as text for logs and JSON (binary ones escaped)."""
    return identity.decode("utf-8", "backslashreplace")


def send(channel: Channel, identity: bytes, message: Message) -> bool:
    """Send ``message`` to ``identity``; False if the peer cannot take it now."""
    try:
        channel.send_to(identity, message, flags=transport.NOBLOCK)
    except transport.Again:
        log.debug("%s to %s dropped: its pipe is full", message.command, show(identity))
        return False
    except transport.ZMQError as exc:
        if exc.errno != transport.EHOSTUNREACH:
            raise
        log.debug("%s to %s dropped: peer is gone", message.command, show(identity))
        return False
    return True


def forward(channel: Channel, identity: bytes, frames: Sequence[bytes]) -> bool:
    """Forward raw frames to ``identity``; False if the peer cannot take them now."""
    try:
        channel.send_frames([identity, *frames], flags=transport.NOBLOCK)
    except transport.Again:
        log.debug("message to %s dropped: its pipe is full", show(identity))
        return False
    except transport.ZMQError as exc:
        if exc.errno != transport.EHOSTUNREACH:
            raise
        log.debug("message to %s dropped: peer is gone", show(identity))
        return False
    return True


class WarnOnce:
    """Logs a peer's bad message at warning once per (socket, peer, reason); repeats at debug."""

    def __init__(self, logger: logging.Logger = log, memory: int = MEMORY) -> None:
        self.logger = logger
        self.memory = memory
        self._seen: OrderedDict[tuple[str, bytes, str], None] = OrderedDict()

    def __call__(self, socket: str, identity: bytes, reason: str, action: str = "ignored") -> None:
        key = (socket, identity, reason)
        if key in self._seen:
            self.logger.debug("%s: %s from %s (again; %s)", socket, reason, show(identity), action)
            return
        self._seen[key] = None
        if len(self._seen) > self.memory:
            self._seen.popitem(last=False)
        self.logger.warning("%s: %s from %s; %s", socket, reason, show(identity), action)


class Outbox:
    """What the router sends to clients, past what ZeroMQ queues for them.

    A send that ZeroMQ refuses (the client's pipe holds ``CLIENT_SNDHWM``
    messages: it reads slower than we send, or never) waits here, in order,
    and goes out when its pipe has room. Everything queued is counted in bytes.
    A client whose queue grows past ``peer_cap``, or the heaviest ones while
    all queues together are past ``budget``, are cut off: their queued
    messages are dropped (one warning each) and, until a send to them goes
    through again, messages for them are dropped rather than queued. Cutting
    costs only messages (ACKs, REJECTs, replies): the jobs a client sent stay
    stored and run, and a job it sends again is acknowledged as a duplicate.
    """

    def __init__(self, channel: Channel, budget: int, peer_cap: int) -> None:
        self.channel = channel
        self.budget = budget
        self.peer_cap = peer_cap
        self._queues: dict[bytes, deque[Sequence[bytes]]] = {}
        self._sizes: dict[bytes, int] = {}
        self.total = 0
        #: Clients cut off and not heard reading since (oldest forgotten past MEMORY).
        self._cut: OrderedDict[bytes, None] = OrderedDict()
        #: Clients cut off, and messages dropped for cut-off clients, since start.
        self.cut_off = 0
        self.dropped = 0

    def __bool__(self) -> bool:
        """True while some messages wait (the router then polls more often)."""
        return bool(self._queues)

    def send(self, identity: bytes, message: Message) -> bool:
        """:meth:`send_frames` of ``message``."""
        frames = encode(message)
        frames.insert(0, identity)
        return self.send_frames(frames)

    def send_frames(self, frames: Sequence[bytes]) -> bool:
        """Send (``frames`` starts with the client's identity) or queue it. True once
        ZeroMQ took it; False when it waits here or is lost (the client is gone
        or cut off). A queued message may yet be dropped (its client cut off)
        while later ones reach the client: a BATCH's ACK must not follow a
        REJECT that is only queued (see ``_reject_now``)."""
        identity = identity_of(frames)
        queue = self._queues.get(identity)
        if queue is not None:
            self._queue(identity, queue, frames)
            return False
        try:
            self.channel.send_frames(frames, flags=transport.NOBLOCK)
        except transport.Again:
            if identity in self._cut:
                self.dropped += 1
                return False
            queue = self._queues[identity] = deque()
            self._sizes[identity] = 0
            self._queue(identity, queue, frames)
            return False
        except transport.ZMQError as exc:
            if exc.errno != transport.EHOSTUNREACH:
                raise
            log.debug("message to %s dropped: peer is gone", show(identity))
            self._cut.pop(identity, None)
            return False
        if self._cut:
            self._cut.pop(identity, None)  # it reads again
        return True

    def flush(self) -> None:
        """Send what waits, oldest first, until each client's pipe is full again."""
        send = self.channel.send_frames
        for identity, queue in list(self._queues.items()):
            try:
                while queue:
                    send(queue[0], flags=transport.NOBLOCK)
                    cost = _cost(queue.popleft())
                    self._sizes[identity] -= cost
                    self.total -= cost
            except transport.Again:
                continue
            except transport.ZMQError as exc:
                if exc.errno != transport.EHOSTUNREACH:
                    raise
                log.debug("%d message(s) to %s dropped: peer is gone", len(queue), show(identity))
            self._drop(identity)

    def as_dict(self) -> dict[str, Any]:
        """For MONITOR: bytes queued, clients waiting, the budget, clients cut off."""
        return {
            "outbox_bytes": self.total,
            "outbox_clients": len(self._queues),
            "outbox_budget": self.budget,
            "clients_cut_off": self.cut_off,
            "messages_dropped": self.dropped,
        }

    def _queue(
        self, identity: bytes, queue: deque[Sequence[bytes]], frames: Sequence[bytes]
    ) -> None:
        queue.append(frames)
        cost = _cost(frames)
        self._sizes[identity] += cost
        self.total += cost
        if self._sizes[identity] > self.peer_cap:
            self._cut_off(
                identity, f"over OUTBOX_PEER_BYTES ({self.peer_cap} bytes for one client)"
            )
        while self.total > self.budget and self._sizes:
            heaviest = max(self._sizes, key=self._sizes.__getitem__)
            self._cut_off(
                heaviest,
                f"the heaviest while all clients' queued messages are over OUTBOX_BUDGET "
                f"({self.budget} bytes)",
            )

    def _drop(self, identity: bytes) -> int:
        """Forget ``identity``'s queue; how many messages it held."""
        queue = self._queues.pop(identity)
        self.total -= self._sizes.pop(identity)
        return len(queue)

    def _cut_off(self, identity: bytes, why: str) -> None:
        size = self._sizes[identity]
        dropped = self._drop(identity)
        self.cut_off += 1
        self.dropped += dropped
        self._cut[identity] = None
        if len(self._cut) > MEMORY:
            self._cut.popitem(last=False)
        log.warning(
            "frontend: client %s cut off: it reads none of what it is sent, %d message(s) "
            "(%d bytes) waited for it, %s; they are dropped and so are new ones until it "
            "reads again. The jobs it sent stay stored; a job it sends again gets its ACK.",
            show(identity),
            dropped,
            size,
            why,
        )


def _cost(frames: Sequence[bytes]) -> int:
    """What a queued message counts against the budget."""
    return sum(map(len, frames)) + FRAME_COST * len(frames)
