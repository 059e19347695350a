"""What a guaranteed bulk send reports: counts per queue and the refused msgids.

:class:`QueueCounts` is what happened to the jobs of one queue (sent,
acknowledged, refused, resent, duplicates) and :class:`SendResult` what
:meth:`.connection.Client.send_many` returns; :class:`.bulk.Pipeline` keeps the
counts as it sends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: REJECT reasons kept per queue (the counts are always complete).
REASONS_KEPT = 5


@dataclass(slots=True)
class QueueCounts:
    """What happened to the jobs of one queue."""

    #: Distinct msgids sent.
    sent: int = 0
    #: msgids the router acknowledged (it holds the job).
    acked: int = 0
    #: msgids the router refused (REJECT); not queued.
    rejected: int = 0
    #: Sends of a msgid again after ``ack_timeout`` without an answer.
    resent: int = 0
    #: Requests whose msgid was already in flight: the same job, not sent again.
    duplicates: int = 0
    #: A few REJECT reasons, for the error report.
    reasons: list[str] = field(default_factory=list)

    def merge(self, other: QueueCounts) -> None:
        """Add ``other``'s counts to these."""
        self.sent += other.sent
        self.acked += other.acked
        self.rejected += other.rejected
        self.resent += other.resent
        self.duplicates += other.duplicates
        for reason in other.reasons:
            if len(self.reasons) < REASONS_KEPT and reason not in self.reasons:
                self.reasons.append(reason)


@dataclass(slots=True)
class SendResult:
    """What :meth:`.connection.Client.send_many` did: counts per queue, and the refused msgids."""

    #: Per queue name.
    counts: dict[str, QueueCounts] = field(default_factory=dict)
    #: msgid -> the router's reason, for every REQUEST it refused (REJECT).
    rejected: dict[str, str] = field(default_factory=dict)
    #: BATCH messages the jobs went in (0: all went as REQUESTs).
    batches: int = 0

    def reject(self, msgid: bytes, reason: str) -> None:
        self.rejected[msgid.decode()] = reason

    @property
    def sent(self) -> int:
        """Distinct msgids sent."""
        return sum(c.sent for c in self.counts.values())

    @property
    def acked(self) -> int:
        """msgids the router acknowledged (0 without ``guarantee``: nothing waited)."""
        return sum(c.acked for c in self.counts.values())

    @property
    def resent(self) -> int:
        """Sends of a msgid again after its ACK did not come in time."""
        return sum(c.resent for c in self.counts.values())
