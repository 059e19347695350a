"""Saying that a peer waits for the router, so a process with no router is not silent.

A job manager or scheduler whose router does not answer retries quietly
with back-off; without these lines its log would stop after "ready" and look
like a hang. Time is passed in (monotonic seconds).
"""

from __future__ import annotations

import logging

__all__ = ["WAIT_LOG_EVERY", "RouterWait"]

#: Seconds between two "still waiting for the router" lines.
WAIT_LOG_EVERY = 60.0


class RouterWait:
    """Logs once when attempts to reach the router start failing, then every
    :data:`WAIT_LOG_EVERY` seconds until :meth:`connected`."""

    def __init__(
        self, logger: logging.Logger, who: str, addr: str, every: float = WAIT_LOG_EVERY
    ) -> None:
        self.logger = logger
        self.who = who
        self.addr = addr
        self.every = every
        #: When the wait began (None: not waiting).
        self.since: float | None = None
        self._next = 0.0

    def no_answer(self, now: float) -> None:
        """An attempt to reach the router got no answer."""
        if self.since is None:
            self.since = now
            self._next = now + self.every
            self.logger.warning(
                "%s waiting for the router at %s: no answer yet (is it running, and is "
                "this its address?); retrying",
                self.who,
                self.addr,
            )
        elif now >= self._next:
            self._next = now + self.every
            self.logger.warning(
                "%s still waiting for the router at %s (%.0fs so far)",
                self.who,
                self.addr,
                now - self.since,
            )

    def lost(self, now: float) -> None:
        """The router went away (the caller said so): the next lines come at the slow rate."""
        self.since = now
        self._next = now + self.every

    def connected(self) -> None:
        self.since = None
