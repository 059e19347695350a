"""Reading what the router sends back: waiting for a job's outcome or its partials,
draining the socket between sends, confirming the router read everything sent.

A mixin of :class:`.connection.Client`, which owns the socket, the session and
the per-job stores (and their bounds); it files each message it reads
(``Client._file``) and keeps an outcome once read (``Client._settle``).
"""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from django_eventmq.protocol import encode
from django_eventmq.protocol.session import ClientSession
from django_eventmq.runtime import transport

if TYPE_CHECKING:
    from django_eventmq.client.connection import Outcome


F = TypeVar("F", bound=Callable[..., Any])


def locked(method: F) -> F:
    """``method`` of a client, run holding its :attr:`Inbox.lock`: a thread other than
    its own may read its socket for a job it sent (:meth:`Inbox.outcome_now`)."""

    @functools.wraps(method)
    def run(self: Inbox, *args: Any, **kwargs: Any) -> Any:
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
    """What a client reads from its socket, and waits for (mixed into the client)."""

    channel: transport.Channel
    session: ClientSession
    #: Held while the socket is used: by its thread for every send and wait, by
    #: another thread only to read what came (:meth:`outcome_now`). ZeroMQ sockets
    #: may move between threads with a memory barrier, never be used by two at once.
    lock: threading.RLock
    _features_unsent: bool
    _outcomes: dict[str, Outcome]
    _partials: dict[str, deque[Any]]
    _settled: dict[str, Outcome]

    if TYPE_CHECKING:

        def _settle(self, job_msgid: str, outcome: Outcome) -> Outcome: ...

        def _file(self, frames: list[bytes], *, inner: bool = False) -> None: ...

    @locked
    def outcome(self, job_msgid: str, timeout: float | None) -> Outcome | None:
        """The REPLY or REJECT for ``job_msgid``, waiting up to ``timeout`` seconds.

        ``None`` when it did not arrive in time. Outcomes for other jobs that
        arrive meanwhile are kept for their own handles.
        """
        found = self._settled.get(job_msgid) or self._outcomes.pop(job_msgid, None)
        if found is not None:
            return self._settle(job_msgid, found)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait_ms = _poll_ms(deadline)
            if wait_ms is None:
                return None
            if not self.channel.poll(wait_ms):
                continue
            self._receive_one()  # the poll said it is there: no second look first
            while self.channel.poll(0):
                self._receive_one()
            found = self._outcomes.pop(job_msgid, None)
            if found is not None:
                return self._settle(job_msgid, found)

    def outcome_now(self, job_msgid: str) -> Outcome | None:
        """The outcome of ``job_msgid`` if it is here now, without waiting; from any thread.

        Reads what came on the socket when no other thread is using it; while
        one is (its own thread sending, or waiting, which files every outcome
        it reads), only looks at what was filed. Waits from another thread and
        from an event loop (``aresult``) are these looks, with pauses between.
        """
        found = self._settled.get(job_msgid) or self._outcomes.pop(job_msgid, None)
        if found is None and self.lock.acquire(blocking=False):
            try:
                self.drain()
                found = self._outcomes.pop(job_msgid, None)
            finally:
                self.lock.release()
        return None if found is None else self._settle(job_msgid, found)

    def seen(self, job_msgid: str) -> Outcome | None:
        """The outcome of ``job_msgid`` a handle already read (the most recent
        ``MAX_SETTLED_OUTCOMES``), without waiting; None if none did."""
        return self._settled.get(job_msgid)

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
            queued = self._partials.get(job_msgid)
            if queued:
                value = queued.popleft()
                if not queued:
                    del self._partials[job_msgid]
                return True, value
            outcome = self._settled.get(job_msgid) or self._outcomes.pop(job_msgid, None)
            if outcome is not None:
                return False, self._settle(job_msgid, outcome)
            wait_ms = _poll_ms(deadline)
            if wait_ms is None:
                return None
            if self.channel.poll(wait_ms):
                while self.channel.poll(0):
                    self._receive_one()

    def _receive_one(self) -> None:
        """Read one message from the router and file it by msgid."""
        self._file(self.channel.recv_frames())

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
        if self._features_unsent:
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
            self.channel.send_frames(encode(session.probe()))
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
            self._receive_one()
            count += 1
        return count
