"""The router's sending policy and its warn-once log.

Sends never block: ROUTER_MANDATORY is on, so a peer whose pipe is full
raises ``Again`` and a peer that is gone raises ``EHOSTUNREACH``. Either
costs that one message (logged at debug), never the router.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence

from ..protocol import Message
from . import transport
from .transport import Channel

log = logging.getLogger("django_eventmq.router")

#: How many "already warned" keys are remembered.
MEMORY = 4096

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
