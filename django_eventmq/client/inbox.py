"""What a client reads back from the router: filing it by job msgid, waiting for a
job's outcome or its partials, draining the socket between sends, confirming the
router read everything sent.

An :class:`Inbox` is held by its :class:`~.connection.Client`, and shares its
socket, its lock and its :class:`~.handshake.Handshake`. What the router sends
back (ACKs, partial replies, job outcomes, rejections) arrives interleaved
between jobs; the inbox files it by job msgid so that each
:class:`~django_eventmq.client.handles.JobHandle` finds its own partials, in
order, and then its outcome, whichever thread reads the socket.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

from django_eventmq.client.handshake import Handshake
from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import Ack, Message, Partial, Reject, Reply, decode
from django_eventmq.protocol.bundle import is_bundle, unbundle
from django_eventmq.protocol.codec import reply_of
from django_eventmq.protocol.frame_fields import is_ack
from django_eventmq.runtime import transport

logger = logging.getLogger("django_eventmq.client")

#: Outcomes (REPLY/REJECT) kept for handles that have not waited yet; the
#: oldest are dropped beyond this, so un-awaited replies cannot grow memory.
MAX_KEPT_OUTCOMES = 10_000
#: Unread partials kept per job (the oldest are dropped beyond this), and jobs
#: with unread partials (the job with the oldest is dropped beyond this).
MAX_KEPT_PARTIALS = 1_000
MAX_PARTIAL_JOBS = 10_000
#: Outcomes already read, kept so that the same handle's next ``.wait()`` or
#: ``.stream()`` has it at once (the most recent ones).
MAX_SETTLED_OUTCOMES = 1_000

#: What a handle may receive for its job: a REPLY (the outcome) or a REJECT.
Outcome = Reply | Reject

F = TypeVar("F", bound=Callable[..., Any])


class _Locked(Protocol):
    lock: threading.RLock


def locked(method: F) -> F:
    """``method`` of an object with a ``lock`` (a client, its inbox), run holding it: a
    thread other than the socket's own may read it for a job it sent
    (:meth:`Inbox.outcome_now`)."""

    @functools.wraps(method)
    def run(self: _Locked, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return method(self, *args, **kwargs)

    return cast(F, run)


def _poll_ms(deadline: float | None) -> int | None:
    """Milliseconds to poll before ``deadline`` (monotonic; None: 1 s slices), None once past."""
    if deadline is None:
        return 1000
    left = deadline - time.monotonic()
    return None if left <= 0 else max(1, int(left * 1000))


class Inbox:
    """What a client reads from its socket, filed by msgid, and waits for."""

    def __init__(
        self,
        channel: transport.Channel,
        handshake: Handshake,
        lock: threading.RLock,
        *,
        addr: str,
    ) -> None:
        """``lock``: the client's, held while the socket is used: by its thread for
        every send and wait, by another thread only to read what came
        (:meth:`outcome_now`). ZeroMQ sockets may move between threads with a
        memory barrier, never be used by two at once."""
        self.channel = channel
        self.handshake = handshake
        self.session = handshake.session
        self.lock = lock
        self.addr = addr
        #: Outcomes by job msgid, oldest first (dicts keep insertion order).
        self.outcomes: dict[str, Outcome] = {}
        #: Unread partial values by job msgid, oldest job first.
        self.partials: dict[str, deque[Any]] = {}
        #: Outcomes already read by a handle, most recent last.
        self.settled: dict[str, Outcome] = {}
        #: msgids of guarantee jobs sent and not yet acknowledged.
        self.awaiting_ack: set[str] = set()
        self.acked: set[str] = set()
        #: REJECT reasons of awaited guarantee jobs (raised by their send).
        self.refused: dict[str, str] = {}

    @locked
    def outcome(self, job_msgid: str, timeout: float | None) -> Outcome | None:
        """The REPLY or REJECT for ``job_msgid``, waiting up to ``timeout`` seconds.

        ``None`` when it did not arrive in time. Outcomes for other jobs that
        arrive meanwhile are kept for their own handles.
        """
        found = self.settled.get(job_msgid) or self.outcomes.pop(job_msgid, None)
        if found is not None:
            return self._settle(job_msgid, found)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait_ms = _poll_ms(deadline)
            if wait_ms is None:
                return None
            if not self.channel.poll(wait_ms):
                continue
            self.receive_one()  # the poll said it is there: no second look first
            while self.channel.poll(0):
                self.receive_one()
            found = self.outcomes.pop(job_msgid, None)
            if found is not None:
                return self._settle(job_msgid, found)

    def outcome_now(self, job_msgid: str) -> Outcome | None:
        """The outcome of ``job_msgid`` if it is here now, without waiting; from any thread.

        Reads what came on the socket when no other thread is using it; while
        one is (its own thread sending, or waiting, which files every outcome
        it reads), only looks at what was filed. Waits from another thread and
        from an event loop (``aresult``) are these looks, with pauses between.
        """
        found = self.settled.get(job_msgid) or self.outcomes.pop(job_msgid, None)
        if found is None and self.lock.acquire(blocking=False):
            try:
                self.drain()
                found = self.outcomes.pop(job_msgid, None)
            finally:
                self.lock.release()
        return None if found is None else self._settle(job_msgid, found)

    def seen(self, job_msgid: str) -> Outcome | None:
        """The outcome of ``job_msgid`` a handle already read (the most recent
        ``MAX_SETTLED_OUTCOMES``), without waiting; None if none did."""
        return self.settled.get(job_msgid)

    @locked
    def next_part(self, job_msgid: str, timeout: float | None) -> tuple[bool, Any] | None:
        """The next thing a stream of ``job_msgid`` reads, waiting up to ``timeout`` seconds.

        ``(True, value)`` for the next partial value (in the order the job
        reported them), ``(False, outcome)`` once they are read and the
        outcome is there (kept for ``.wait()``), ``None`` when nothing came
        in time. Messages for other jobs that arrive meanwhile are filed for
        their own handles.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            queued = self.partials.get(job_msgid)
            if queued:
                value = queued.popleft()
                if not queued:
                    del self.partials[job_msgid]
                return True, value
            outcome = self.settled.get(job_msgid) or self.outcomes.pop(job_msgid, None)
            if outcome is not None:
                return False, self._settle(job_msgid, outcome)
            wait_ms = _poll_ms(deadline)
            if wait_ms is None:
                return None
            if self.channel.poll(wait_ms):
                while self.channel.poll(0):
                    self.receive_one()

    def receive_one(self) -> None:
        """Read one message from the router and file it by msgid."""
        self.file(self.channel.recv_frames())

    @locked
    def confirm_read(self, deadline: float) -> bool | None:
        """Wait until the router has read every message this client sent, at
        the latest until ``deadline`` (monotonic): True once it has, False if
        it did not say so in time.

        A router of ours answers FEATURES in the order messages come, so the
        answer to one sent now comes after it read all the others. None when
        it cannot say: nothing went out (no router ever connected), or the
        router is not ours (the reference router answers no FEATURES): it
        sent something else first, or left our first FEATURES unanswered for
        ``SEND_TIMEOUT``. Messages read meanwhile are filed as usual.
        """
        if self.handshake.unsent:
            return None
        session = self.session
        self.drain()  # the answer may be waiting, though the time to wait for it is over
        if session.router_features is None:
            # Ours answers our first FEATURES before anything else, within
            # SEND_TIMEOUT unless it is not reading (then nothing is confirmed).
            by = min(deadline, session.decide_by)
            self._read_until(lambda: not session.asking, by - time.monotonic())
            if session.router_features is None:
                return None
        answered = session.answers
        # Our pipe may be full (a fast sender's last jobs): wait for room.
        self.channel.socket.setsockopt(
            transport.SNDTIMEO, max(0, int((deadline - time.monotonic()) * 1000))
        )
        try:
            self.channel.send_frames(self.handshake.probe())
        except transport.Again:
            return False  # the router is not reading
        return self._read_until(lambda: session.answers > answered, deadline - time.monotonic())

    def _read_until(self, done: Callable[[], bool], timeout: float) -> bool:
        """File what the router sends until ``done()``, for up to ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not done():
            wait_ms = _poll_ms(deadline)
            if wait_ms is None:
                return False
            if self.channel.poll(wait_ms):
                self.drain()
        return True

    @locked
    def drain(self) -> int:
        """Read what the router sent us without waiting; returns how many messages.

        ACKs nobody waits on are dropped; outcomes are kept for their handles.
        """
        count = 0
        while self.channel.poll(0):
            self.receive_one()
            count += 1
        return count

    # -- ACKs a guaranteed send waits for ------------------------------------------
    def expect_ack(self, job_msgid: str) -> None:
        """A send waits for the router's ACK of ``job_msgid``: file it (or its REJECT)."""
        self.awaiting_ack.add(job_msgid)

    def acked_now(self, job_msgid: str) -> bool:
        """The router acknowledged ``job_msgid`` (it is stored)."""
        return job_msgid in self.acked

    def take_refusal(self, job_msgid: str) -> str | None:
        """The reason of a REJECT of ``job_msgid`` that came since the last look, if any."""
        return self.refused.pop(job_msgid, None)

    def forget_ack(self, job_msgid: str) -> None:
        """Nobody waits for ``job_msgid``'s ACK any more."""
        self.awaiting_ack.discard(job_msgid)
        self.acked.discard(job_msgid)
        self.refused.pop(job_msgid, None)

    # -- filing -----------------------------------------------------------------
    def _settle(self, job_msgid: str, outcome: Outcome) -> Outcome:
        """``outcome`` was read: keep it for the handle's next look, drop unread partials."""
        self.partials.pop(job_msgid, None)
        settled = self.settled
        settled[job_msgid] = outcome
        if len(settled) > MAX_SETTLED_OUTCOMES:
            # Another thread may settle at once (outcome_now takes no lock to).
            with contextlib.suppress(StopIteration, KeyError, RuntimeError):
                del settled[next(iter(settled))]
        return outcome

    def file(self, frames: list[bytes], *, inner: bool = False) -> None:
        """File one message from the router by msgid (``inner``: one of a bundle's)."""
        # The common case, an ACK of a job nobody waits on, is skipped undecoded
        # (packed, as the router ACKs a packed REQUEST, or not).
        if not self.awaiting_ack and is_ack(frames):
            self.session.heard()
            return
        if len(frames) == 1 and is_bundle(frames[0]) and not inner:
            # The ACKs one commit released (protocol/bundle.py): each as if alone.
            try:
                messages = unbundle(frames[0])
            except ProtocolError as exc:
                self.session.heard()
                logger.warning(
                    "ignored a malformed bundle from the router at %s: %s", self.addr, exc
                )
                return
            for message_frames in messages:
                # A bundle in a bundle is no eMQP message: decode refuses it below.
                self.file(message_frames, inner=True)
            return
        # A job's outcome (what .wait() waits for) straight to its Reply; the rest decoded.
        message: Message | None = reply_of(frames)
        if message is None:
            try:
                message = decode(frames)
            except ProtocolError as exc:
                self.session.heard()
                logger.warning(
                    "ignored a malformed message from the router at %s: %s", self.addr, exc
                )
                return
        self.session.receive(message)
        if isinstance(message, Ack):
            if message.ack_msgid in self.awaiting_ack:
                self.acked.add(message.ack_msgid)
        elif isinstance(message, Reply):
            if message.reply_to is None:
                # The reference router's receipt for a forwarded REQUEST:
                # REPLY whose payload is the job's msgid. As good as an ACK.
                if message.payload in self.awaiting_ack:
                    self.acked.add(message.payload)
            else:
                self._keep(message.reply_to, message)
        elif isinstance(message, Partial):
            self._keep_partial(message)
        elif isinstance(message, Reject):
            logger.info("router rejected msgid=%s: %s", message.job_msgid, message.reason)
            if message.job_msgid in self.awaiting_ack:
                self.refused[message.job_msgid] = message.reason  # its send raises
            else:
                self._keep(message.job_msgid, message)
        # FEATURES (the answer to ours, or to a send_many's after it returned): the
        # session has it. HEARTBEAT, DISCONNECT and others need nothing from a client.

    def _keep(self, job_msgid: str, message: Outcome) -> None:
        outcomes = self.outcomes
        outcomes[job_msgid] = message
        if len(outcomes) > MAX_KEPT_OUTCOMES:
            oldest = next(iter(outcomes))
            del outcomes[oldest]
            logger.warning(
                "dropped the unclaimed outcome of msgid=%s (more than %d kept)",
                oldest,
                MAX_KEPT_OUTCOMES,
            )

    def _keep_partial(self, message: Partial) -> None:
        partials = self.partials
        queued = partials.get(message.job_msgid)
        if queued is None:
            queued = partials[message.job_msgid] = deque(maxlen=MAX_KEPT_PARTIALS)
            if len(partials) > MAX_PARTIAL_JOBS:
                oldest = next(iter(partials))
                del partials[oldest]
                logger.debug("dropped the unread partials of msgid=%s", oldest)
        queued.append(message.value)
