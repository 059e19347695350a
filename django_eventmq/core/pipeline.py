"""Guaranteed bulk sending: many REQUESTs with a window of them unacknowledged.

:class:`Pipeline` keeps up to ``window`` REQUESTs sent and not yet answered
on a DEALER channel. Each one stays in the window until the router answers
it: ACK (stored: our router sends it only once the job is in its journal),
REJECT (refused, with a reason) or, from a reference router, the REPLY whose
payload is the msgid. A REQUEST not answered within ``ack_timeout`` is sent
again *with the same msgid*; the router holds a msgid once, so a resend can
not double a job. :meth:`Pipeline.flush` returns once every REQUEST was
answered, and raises :class:`~django_eventmq.errors.BrokerUnavailable` when
the router said nothing for ``give_up`` seconds while some waited.

It sends as fast as the router acknowledges, where a guaranteed send that
waits for each ACK in turn pays a round trip (and a journal commit) per job.
Used by :meth:`.client.Client.send_many` and by the Spark integration.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from ..errors import BrokerUnavailable, ProtocolError
from ..protocol import Reply, Request, decode
from ..protocol.constants import ACK, PROTOCOL_VERSION_B, REQUEST
from ..protocol.extensions import Reject
from . import transport

log = logging.getLogger("django_eventmq.client")

#: REQUESTs in flight (sent, not yet answered) per pipeline.
DEFAULT_WINDOW = 10_000
#: The window of :meth:`.client.Client.send_many`: enough to keep a router's
#: group commits full, small enough to resend cheaply after a router restart.
CLIENT_WINDOW = 2_000
#: Seconds without an answer after which a REQUEST is sent again (same msgid).
DEFAULT_ACK_TIMEOUT = 10.0
#: Seconds without any answer from the router, while REQUESTs wait, before giving up.
DEFAULT_GIVE_UP = 120.0
#: Sends between two non-blocking reads of the answers.
READ_EVERY = 64
#: REJECT reasons kept per queue (the counts are always complete).
REASONS_KEPT = 5

_VERSION = PROTOCOL_VERSION_B
_REQUEST = REQUEST.encode()
_ACK = ACK.encode()
_NOBLOCK = transport.NOBLOCK


class RequestFrames(NamedTuple):
    """A REQUEST's fields, already encoded (what :class:`Pipeline` sends)."""

    msgid: bytes
    queue: bytes
    headers: bytes
    body: bytes


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
    """What :meth:`.client.Client.send_many` did: counts per queue, and the refused msgids."""

    #: Per queue name.
    counts: dict[str, QueueCounts] = field(default_factory=dict)
    #: msgid -> the router's reason, for every REQUEST it refused (REJECT).
    rejected: dict[str, str] = field(default_factory=dict)

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


def encode_requests(
    requests: Iterable[Request | tuple[bytes, bytes, bytes, bytes]],
) -> Iterator[tuple[bytes, bytes, bytes, bytes]]:
    """``(msgid, queue, headers, body)`` for REQUEST messages or already encoded fields."""
    for request in requests:
        if isinstance(request, Request):
            yield (
                request.msgid.encode(),
                request.queue.encode(),
                request.headers.encode().encode(),
                request.body_text.encode(),
            )
        else:
            yield request


def check_window(window: int, ack_timeout: float, give_up: float) -> None:
    """Raise ``ValueError`` for a window or timeouts a pipeline cannot work with."""
    if window < 1:
        raise ValueError(f"window must be at least 1, got {window}")
    if ack_timeout <= 0 or give_up <= 0:
        raise ValueError("ack_timeout and give_up must be positive")


class Pipeline:
    """Up to ``window`` REQUESTs in flight on ``channel`` (a DEALER), resending the silent ones.

    The channel belongs to the caller (made in the thread that uses it, with
    a send high-water mark of at least ``window``). What the router sends
    that is not an answer to a REQUEST in flight goes to ``on_other``.
    """

    def __init__(
        self,
        channel: transport.Channel,
        *,
        addr: str,
        window: int = DEFAULT_WINDOW,
        ack_timeout: float = DEFAULT_ACK_TIMEOUT,
        give_up: float = DEFAULT_GIVE_UP,
        clock: Callable[[], float] = time.monotonic,
        on_wait: Callable[[], object] | None = None,
        on_other: Callable[[list[bytes]], object] | None = None,
        on_reject: Callable[[bytes, str], object] | None = None,
        logger: logging.Logger = log,
    ) -> None:
        check_window(window, ack_timeout, give_up)
        self.channel = channel
        self.addr = addr
        self.window = window
        self.ack_timeout = ack_timeout
        self.give_up = give_up
        self._clock = clock
        #: Called whenever the pipeline waits for answers (progress reports).
        self.on_wait = on_wait
        #: Called with the frames of every message that answers no REQUEST in flight.
        self.on_other = on_other
        #: Called with the msgid and reason of every REQUEST the router refused.
        self.on_reject = on_reject
        self._log = logger
        #: Per queue name.
        self.counts: dict[str, QueueCounts] = {}
        # msgid -> (queue, headers, body, time sent), oldest first: a resend
        # moves an entry to the end, so the first entry is always the next due.
        self._pending: dict[bytes, tuple[bytes, bytes, bytes, float]] = {}
        self._by_queue: dict[bytes, QueueCounts] = {}
        self._last_answer = clock()
        self._sends = 0
        self._warned = False

    # -- sending -----------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        """REQUESTs sent and not yet answered."""
        return len(self._pending)

    def send(self, msgid: bytes, queue: bytes, headers: bytes, body: bytes) -> None:
        """Send one REQUEST (fields already encoded); waits while the window is full."""
        self.send_requests(((msgid, queue, headers, body),))

    def send_many(
        self,
        msgids: Iterable[bytes],
        queues: Iterable[bytes],
        headers: bytes,
        bodies: Iterable[bytes],
    ) -> None:
        """Send REQUESTs for parallel sequences of msgids, queue names and bodies."""
        self.send_requests(
            (msgid, queue, headers, body)
            for msgid, queue, body in zip(msgids, queues, bodies, strict=True)
        )

    def send_requests(self, requests: Iterable[tuple[bytes, bytes, bytes, bytes]]) -> None:
        """Send ``(msgid, queue, headers, body)`` REQUESTs, waiting while the window is full."""
        pending = self._pending
        window = self.window
        clock = self._clock
        for msgid, queue, headers, body in requests:
            counts = self._by_queue.get(queue) or self._counts_for(queue)
            if msgid in pending:
                counts.duplicates += 1
                continue
            while len(pending) >= window:
                self._wait()
            if not pending:
                self._last_answer = clock()  # the give-up clock starts now
            self._send(msgid, queue, headers, body)
            pending[msgid] = (queue, headers, body, clock())
            counts.sent += 1
            self._sends += 1
            if self._sends % READ_EVERY == 0:
                self._read()

    def flush(self) -> None:
        """Wait until the router answered every REQUEST sent (ACK or REJECT).

        Raises :class:`BrokerUnavailable` when the router said nothing for
        ``give_up`` seconds while REQUESTs were waiting.
        """
        while self._pending:
            self._wait()

    # -- internals ----------------------------------------------------------------
    def _counts_for(self, queue: bytes) -> QueueCounts:
        name = queue.decode()
        counts = self.counts.setdefault(name, QueueCounts())
        self._by_queue[queue] = counts
        return counts

    def _send(self, msgid: bytes, queue: bytes, headers: bytes, body: bytes) -> None:
        deadline = self._clock() + self.give_up
        while not self._try_send(msgid, queue, headers, body):
            # The pipe to the router is full: it is not reading. Wait for
            # answers (or give up) instead of blocking for ever.
            if self._clock() > deadline:
                raise BrokerUnavailable(
                    f"the router at {self.addr} took no message for {self.give_up:g}s"
                )
            self._wait()

    def _try_send(self, msgid: bytes, queue: bytes, headers: bytes, body: bytes) -> bool:
        try:
            self.channel.send_frames(
                (b"", _VERSION, _REQUEST, msgid, queue, headers, body), flags=_NOBLOCK
            )
        except transport.Again:
            return False
        return True

    def _wait(self) -> None:
        """Wait a little for answers, then resend what is overdue."""
        if self.on_wait is not None:
            self.on_wait()
        now = self._clock()
        timeout = self.ack_timeout
        if self._pending:
            oldest = next(iter(self._pending.values()))[3]
            timeout = max(0.0, oldest + self.ack_timeout - now)
        if self.channel.poll(int(min(timeout, 0.1) * 1000) + 1):
            self._read()
        now = self._clock()
        if self._pending and now - self._last_answer > self.give_up:
            raise BrokerUnavailable(
                f"the router at {self.addr} answered nothing for {self.give_up:g}s; "
                f"{len(self._pending)} REQUEST(s) unacknowledged (is emq_router running?)"
            )
        self._resend_due(now)

    def _resend_due(self, now: float) -> None:
        pending = self._pending
        while pending:
            msgid, (queue, headers, body, sent_at) = next(iter(pending.items()))
            if now - sent_at < self.ack_timeout:
                return
            if not self._try_send(msgid, queue, headers, body):
                return  # the pipe is full; the next wait tries again
            del pending[msgid]
            pending[msgid] = (queue, headers, body, now)
            self._by_queue[queue].resent += 1

    def _read(self) -> None:
        """Take every answer waiting on the socket, without blocking."""
        recv = self.channel.recv_frames
        pending = self._pending
        while True:
            try:
                frames = recv(flags=_NOBLOCK)
            except transport.Again:
                return
            self._last_answer = self._clock()
            # The hot path: ['', 'eMQP/1.0', 'ACK', <its msgid>, <our msgid>].
            if len(frames) == 5 and frames[2] == _ACK and frames[1] == _VERSION:
                entry = pending.pop(frames[4], None)
                if entry is not None:
                    self._by_queue[entry[0]].acked += 1
                # else: a late ACK of a msgid we resent; the first one counted.
            else:
                self._other(frames)

    def _other(self, frames: list[bytes]) -> None:
        try:
            message = decode(frames)
        except ProtocolError as exc:
            self._warn_once(f"ignored a malformed message from the router: {exc.reason}")
            return
        if isinstance(message, Reject):
            key = message.job_msgid.encode()
            entry = self._pending.pop(key, None)
            if entry is not None:
                counts = self._by_queue[entry[0]]
                counts.rejected += 1
                if len(counts.reasons) < REASONS_KEPT and message.reason not in counts.reasons:
                    counts.reasons.append(message.reason)
                if self.on_reject is not None:
                    self.on_reject(key, message.reason)
                return
        elif isinstance(message, Reply) and message.reply_to is None:
            # The reference router's receipt for a REQUEST: REPLY with its msgid.
            entry = self._pending.pop(message.payload.encode(), None)
            if entry is not None:
                self._by_queue[entry[0]].acked += 1
                return
        if self.on_other is not None:
            self.on_other(frames)
        else:
            self._log.debug("ignored %s from the router", message.command)

    def _warn_once(self, text: str) -> None:
        if not self._warned:
            self._warned = True
            self._log.warning("%s (further ones are not logged)", text)
