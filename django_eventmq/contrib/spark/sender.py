"""Send many REQUESTs to a router with a window of them in flight, each acknowledged once.

This is the executor side of the Spark integration, and needs nothing but
pyzmq (through :mod:`django_eventmq.core.transport`). A Spark task makes one
:class:`PipelinedSender`, feeds it pre-encoded REQUESTs and calls
:meth:`~PipelinedSender.flush`: it returns once the router has acknowledged
(ACK) or refused (REJECT) every msgid. A REQUEST that is not answered within
``ack_timeout`` is sent again *with the same msgid*: the router runs a msgid
once, so a resend (or a whole Spark task attempt sent again) cannot double a job.

With CURVE keys in the settings (by default the executor's ``EMQ_*``
environment) the socket speaks CURVE to the router's frontend, as a client.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ...core import security, transport
from ...core.settings import Settings, from_mapping
from ...errors import BrokerUnavailable, ProtocolError
from ...protocol import decode
from ...protocol.constants import ACK, PROTOCOL_VERSION_B, REQUEST
from ...protocol.extensions import Reject

log = logging.getLogger("django_eventmq.spark")

#: REQUESTs in flight (sent, not yet answered) per sender.
DEFAULT_WINDOW = 10_000
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
_REJECT = Reject.command.encode()
_NOBLOCK = transport.NOBLOCK


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
    #: Rows whose msgid was already in flight: the same job, not sent again.
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


class PipelinedSender:
    """A DEALER that keeps up to ``window`` REQUESTs in flight and resends the silent ones.

    Make it in the process and thread that use it (a Spark task), and close it.
    """

    def __init__(
        self,
        addr: str,
        *,
        window: int = DEFAULT_WINDOW,
        ack_timeout: float = DEFAULT_ACK_TIMEOUT,
        give_up: float = DEFAULT_GIVE_UP,
        identity_prefix: str = "spark-",
        clock: Callable[[], float] = time.monotonic,
        on_wait: Callable[[], object] | None = None,
        settings: Settings | None = None,
    ) -> None:
        """Connect to ``addr``; ``settings`` (default: from ``EMQ_*``) give the CURVE keys."""
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}")
        if ack_timeout <= 0 or give_up <= 0:
            raise ValueError("ack_timeout and give_up must be positive")
        self.addr = addr
        self.window = window
        self.ack_timeout = ack_timeout
        self.give_up = give_up
        self._clock = clock
        #: Called whenever the sender waits for answers (progress reports).
        self.on_wait = on_wait
        #: Per queue name.
        self.counts: dict[str, QueueCounts] = {}
        # msgid -> (queue, headers, body, time sent), oldest first: a resend
        # moves an entry to the end, so the first entry is always the next due.
        self._pending: dict[bytes, tuple[bytes, bytes, bytes, float]] = {}
        self._by_queue: dict[bytes, QueueCounts] = {}
        self._last_answer = clock()
        self._sends = 0
        self._warned = False
        self.channel = transport.Channel(
            transport.DEALER,
            connect=addr,
            # Room for the whole window: sends only block on a router that
            # stopped reading, and then we notice (see _send).
            hwm=window + READ_EVERY,
            identity=transport.new_identity(identity_prefix),
            options=security.secure_channel_options(
                settings if settings is not None else from_mapping(),
                security.FRONTEND,
                security.CLIENT,
            ),
        )

    # -- sending -----------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        """REQUESTs sent and not yet answered."""
        return len(self._pending)

    def send(self, msgid: bytes, queue: bytes, headers: bytes, body: bytes) -> None:
        """Send one REQUEST (fields already encoded); waits while the window is full."""
        self.send_many((msgid,), (queue,), headers, (body,))

    def send_many(
        self,
        msgids: Iterable[bytes],
        queues: Iterable[bytes],
        headers: bytes,
        bodies: Iterable[bytes],
    ) -> None:
        """Send REQUESTs for parallel sequences of msgids, queue names and bodies."""
        pending = self._pending
        window = self.window
        clock = self._clock
        for msgid, queue, body in zip(msgids, queues, bodies, strict=True):
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

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> PipelinedSender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
            entry = self._pending.pop(message.job_msgid.encode(), None)
            if entry is not None:
                counts = self._by_queue[entry[0]]
                counts.rejected += 1
                if len(counts.reasons) < REASONS_KEPT and message.reason not in counts.reasons:
                    counts.reasons.append(message.reason)
        else:
            log.debug("ignored %s from the router", message.command)

    def _warn_once(self, text: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning("%s (further ones are not logged)", text)
