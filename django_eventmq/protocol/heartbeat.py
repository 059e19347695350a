"""Heartbeat bookkeeping for one peer. Time is passed in (monotonic seconds)."""

from __future__ import annotations

from dataclasses import dataclass

from django_eventmq.protocol.constants import HEARTBEAT_INTERVAL, HEARTBEAT_TIMEOUT


@dataclass(slots=True)
class Liveness:
    """When we last heard from a peer and last sent to it.

    Any command but DISCONNECT counts as a heartbeat (spec), so callers call
    :meth:`heard` for every message and :meth:`sent` for every send.
    """

    now: float
    interval: float = HEARTBEAT_INTERVAL
    timeout: float = HEARTBEAT_TIMEOUT
    last_heard: float = 0.0
    last_sent: float = 0.0

    def __post_init__(self) -> None:
        if self.interval <= 0 or self.timeout <= 0:
            raise ValueError("heartbeat interval and timeout must be > 0")
        self.last_heard = self.last_sent = self.now

    def heard(self, now: float) -> None:
        self.last_heard = now

    def sent(self, now: float) -> None:
        self.last_sent = now

    def expired(self, now: float) -> bool:
        """True once the peer has been silent for longer than the timeout."""
        return now - self.last_heard > self.timeout

    def due(self, now: float) -> bool:
        """True when we owe the peer a HEARTBEAT."""
        return now - self.last_sent >= self.interval
