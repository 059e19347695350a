"""One exception tree for django-eventmq, rooted at :class:`EventMQError`.

Where a built-in exception already says what kind of failure it is, ours
subclasses it too, so callers may catch either (``except ValueError``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta


class EventMQError(Exception):
    """Base class of every error raised by django-eventmq."""


class ProtocolError(ValueError, EventMQError):
    """A message that does not follow eMQP/1.0.

    Keeps the raw frames (as received) so the caller can log them once.
    """

    def __init__(self, reason: str, frames: Sequence[bytes] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.frames: tuple[bytes, ...] = tuple(frames or ())
        #: Routing identity of the peer that sent it, when known.
        self.identity: bytes = b""

    def with_frames(self, frames: Sequence[bytes]) -> ProtocolError:
        """Return a copy of this error that carries ``frames``."""
        err = type(self)(self.reason, frames)
        err.__cause__ = self.__cause__ or self
        return err


class InvalidJob(ProtocolError):
    """A job body (``["run", {...}]``) that cannot describe a job."""


class JobNotAllowed(PermissionError, EventMQError):
    """A REQUEST named a callable that was not registered with ``@job``."""


class JobNotFound(LookupError, EventMQError):
    """A registered job module or callable could not be imported."""


class AdminRefused(PermissionError, EventMQError):
    """The router refused a state-changing admin command (DISCONNECT, POISONED_*): it
    carried no admin token, or not the router's; nothing was changed."""


class ConfigurationError(ValueError, EventMQError):
    """A setting has a value that cannot work; the message says how to fix it."""


class BrokerUnavailable(ConnectionError, EventMQError):
    """The router could not be reached (or did not acknowledge) in time.

    ``msgid``: the job's, when a guaranteed send got no ACK after sending it (it
    may be stored: send it again with this msgid); empty otherwise.
    """

    msgid: str = ""


class RouterFull(BrokerUnavailable):
    """The router is running but took no job in time: it is full (above its
    high-water mark, HWM_POLICY ``block``, it reads no client until below 90% of it),
    or, blocked the same way, cannot write its journal (MONITOR's ``journal_failure``)."""


class SerializationError(TypeError, EventMQError):
    """Job arguments or a return value that cannot be sent as JSON."""


class JobError(EventMQError):
    """A job ran and failed remotely; carries the remote exception's class and message."""

    def __init__(self, exc_type: str, message: str, traceback: str = "") -> None:
        super().__init__(f"{exc_type}: {message}")
        self.exc_type = exc_type
        self.message = message
        self.traceback = traceback


class JobExpired(JobError):
    """The job was not started before its ``expires`` time, so it never ran."""


class ResultTimeout(TimeoutError, EventMQError):
    """Waiting for a job's result took longer than the caller allowed."""


class JobRejected(EventMQError):
    """The router or a job manager refused the job; ``reason`` says why, ``msgid``
    names the job (when the refusal answered its send)."""

    def __init__(self, reason: str, *, msgid: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.msgid = msgid


class JobNotSent(EventMQError):
    """A job queued with ``delay_on_commit()`` that no router will ever see: its
    transaction rolled back (so it was dropped), or its send at the commit failed
    (the message says why). ``msgid`` names the job."""

    def __init__(self, reason: str, *, msgid: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.msgid = msgid


class SoftTimeLimitExceeded(EventMQError):
    """Raised inside a running job when its ``soft_timeout`` passes, so it can clean up.

    Catch it to tidy up, then re-raise (the job fails with this error) or
    return a value (the job succeeds). The hard ``timeout`` still stops the
    worker process if the job goes on. An async job sees
    :class:`asyncio.CancelledError` at the ``await`` it was in instead; if the
    cancellation ends it, the job fails with this error.
    """


class JobNotUnique(JobRejected):
    """The router refused a unique job: another job with the same unique key is
    queued or running, or was accepted less than its ``unique_for`` seconds ago.

    ``holder`` is that job's msgid (``JobHandle(exc.holder).status`` reads its
    results row; ``.wait()`` on it works in the thread that sent it), ``msgid``
    the refused job's.
    """

    def __init__(self, reason: str, *, msgid: str, holder: str) -> None:
        super().__init__(reason, msgid=msgid)
        self.holder = holder


class WorkflowCancelled(EventMQError):
    """The workflow was cancelled (``handle.cancel()``): its remaining members never run."""


class Retry(EventMQError):
    """Raise inside a job to have it run again later: ``raise Retry(in_=30)``.

    ``in_`` (seconds, or a timedelta) or ``at`` (an aware datetime) says when;
    with neither, the job's back-off applies (``@job(retry_backoff=...)``, else
    ``RETRY_BACKOFF_BASE``). It is an attempt like any failure: it uses up one of
    the job's ``retry_count``, and once they are used up the job fails with this
    error (so a job that always asks again still stops). The retry goes through
    the router, which holds the job (in its journal) until then.
    """

    def __init__(
        self, in_: float | timedelta | None = None, *, at: datetime | None = None, reason: str = ""
    ) -> None:
        if in_ is not None and at is not None:
            raise ConfigurationError("Retry takes in_= or at=, not both")
        if in_ is not None:
            seconds = in_.total_seconds() if isinstance(in_, timedelta) else in_
            if isinstance(seconds, bool) or not isinstance(seconds, int | float):
                raise ConfigurationError(f"Retry(in_=) takes seconds or a timedelta, got {in_!r}")
            if not math.isfinite(seconds) or seconds < 0:
                raise ConfigurationError(f"Retry(in_=) must be >= 0 seconds, got {in_!r}")
            in_ = float(seconds)
        if at is not None and (not isinstance(at, datetime) or at.utcoffset() is None):
            raise ConfigurationError(
                f"Retry(at=) takes an aware datetime (with a tzinfo), got {at!r}"
            )
        #: Seconds to wait (None: ``at``, or the job's back-off).
        self.in_: float | None = in_
        self.at = at
        self.reason = reason
        when = f" in {in_:g}s" if in_ is not None else f" at {at.isoformat()}" if at else ""
        super().__init__(f"the job asked to be retried{when}" + (f": {reason}" if reason else ""))

    def seconds(self, now: float) -> float | None:
        """Seconds from unix time ``now`` until the retry (None: the back-off decides)."""
        if self.at is not None:
            return max(0.0, self.at.timestamp() - now)
        return self.in_
