"""The outbox relay: a scheduler sends the outbox rows their own process did not.

A job sent with ``outbox`` (``.delay_on_commit()``, docs/durability.md) is a
row of the outbox table, committed with the caller's transaction; the caller's
process sends it after the commit and deletes the row once the router
acknowledged it. A row older than ``OUTBOX_RELAY_AFTER`` seconds was not (the
process died between the commit and the send, or the router was down): the
relay sends it as it was written (its msgid, queue, headers and body) and
deletes it once the router acknowledged it. Delivery is at least once: a row
sent by both (its process was slow, or died after the send but before the
delete) reaches the router twice under one msgid, and the router runs it once
(it refuses a msgid it holds or finished within ``DEDUP_WINDOW``). Never
imports Django: the table is an :class:`OutboxStore`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import NamedTuple, Protocol

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import Request, parse_headers
from django_eventmq.protocol.status import refused_for_now

logger = logging.getLogger("django_eventmq.scheduler")

#: Rows read per look at the table.
RELAY_BATCH = 500


class OutboxRow(NamedTuple):
    """One job of the outbox as it is sent."""

    msgid: str
    queue: str
    headers: str
    body: str


class OutboxStore(Protocol):
    """The outbox table (the Django ORM in ``django_eventmq.schedule_database``)."""

    def due(self, before: datetime, limit: int) -> Sequence[OutboxRow]:
        """Up to ``limit`` rows written before ``before``, oldest first."""
        ...

    def delete(self, msgids: Sequence[str]) -> None:
        """Delete the rows of ``msgids`` (the router acknowledged them)."""
        ...


class OutboxRelay:
    """Sends outbox rows left by their process; deletes each once the router answered it."""

    def __init__(self, store: OutboxStore, *, after: float, every: float, resend: float) -> None:
        self.store = store
        #: Seconds a row is left to its own process before it is relayed.
        self.after = after
        #: Seconds between two looks at the table.
        self.every = every
        #: Seconds without an ACK after which a relayed row is sent again.
        self.resend = resend
        #: msgid -> when it was relayed (monotonic), until the router answers.
        self.in_flight: dict[str, float] = {}
        #: msgids the router answered, whose rows are deleted at the next turn.
        self.answered: list[str] = []
        #: Rows that cannot be sent (bad headers): logged once, left in the table.
        self.unsendable: set[str] = set()
        self._looked_at = -1e18
        self.relayed = 0

    def turn(self, send: Callable[[Request], None] | None, now: datetime, mono: float) -> int:
        """Delete the rows answered, then (every ``every`` seconds) send the rows due
        through ``send`` (None: no router to send to); returns how many were sent."""
        if self.answered:
            self.store.delete(self.answered)
            self.answered = []
        if send is None or mono - self._looked_at < self.every:
            return 0
        self._looked_at = mono
        sent = 0
        for row in self.store.due(now - timedelta(seconds=self.after), RELAY_BATCH):
            at = self.in_flight.get(row.msgid)
            if (at is not None and mono - at < self.resend) or row.msgid in self.unsendable:
                continue
            request = self._request(row)
            if request is None:
                continue
            send(request)
            self.in_flight[row.msgid] = mono
            sent += 1
            logger.info("scheduler: relayed outbox job msgid %s queue %s", row.msgid, row.queue)
        # Rows deleted by their process meanwhile are never answered: forget them.
        stale = [m for m, at in self.in_flight.items() if mono - at > 10 * self.resend]
        for msgid in stale:
            del self.in_flight[msgid]
        self.relayed += sent
        return sent

    def _request(self, row: OutboxRow) -> Request | None:
        try:
            return Request(
                msgid=row.msgid,
                queue=row.queue,
                headers=parse_headers(row.headers),
                body_text=row.body,
            )
        except (ProtocolError, ValueError) as exc:
            self.unsendable.add(row.msgid)
            logger.error(
                "scheduler: outbox job msgid %s cannot be sent (%s); its row is left in the "
                "outbox table: fix or delete it",
                row.msgid,
                exc,
            )
            return None

    def acked(self, msgid: str) -> bool:
        """The router stored ``msgid``: True if it is a relayed row (deleted next turn)."""
        if self.in_flight.pop(msgid, None) is None:
            return False
        self.answered.append(msgid)
        return True

    def refused(self, msgid: str, reason: str) -> bool:
        """The router refused ``msgid``: True if it is a relayed row. Its row is deleted
        (logged) unless the refusal passes (the router is full): then it is sent again."""
        if msgid not in self.in_flight:
            return False
        if refused_for_now(reason):
            logger.info("scheduler: outbox job msgid %s is sent again later: %s", msgid, reason)
            return True  # left in flight: sent again after ``resend`` seconds
        del self.in_flight[msgid]
        logger.warning("scheduler: the router refused outbox job msgid %s: %s", msgid, reason)
        self.answered.append(msgid)
        return True
