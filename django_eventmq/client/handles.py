"""What ``.delay()`` returns: the job's msgid, as a string that can also wait.

A :class:`JobHandle` *is* the msgid (a ``str`` subclass), so code that stored
the msgid keeps working. ``.wait()`` reads the job's outcome from the
client socket that sent the job, where the router sends it for
``reply_requested`` jobs (no database polling), from whichever thread of the
process waits; ``await .aresult()`` does the same without blocking an event
loop; ``.stream()`` reads the job's partial replies
(:mod:`~django_eventmq.jobmanager.progress`) from the same socket, then ends at its outcome.
``.status`` and ``.result`` read the results table through a reader the
Django app installs (:mod:`~django_eventmq.runtime.hooks`), unless the handle already read
the job's outcome (``.wait()``, ``.stream()``): then they say what it said,
without a query (the table is written in batches, so it may lag).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from types import GeneratorType
from typing import Any, ClassVar

from django_eventmq.client.connection import Client
from django_eventmq.client.inbox import Outcome
from django_eventmq.client.pool import existing_client, get_client, sender_of
from django_eventmq.client.shards import ShardedClient
from django_eventmq.errors import (
    EventMQError,
    JobError,
    JobExpired,
    JobNotSent,
    JobRejected,
    ProtocolError,
    ResultTimeout,
)
from django_eventmq.protocol import Reject, decode_json
from django_eventmq.protocol.status import EXPIRED_ERROR, JobStatus
from django_eventmq.runtime import hooks
from django_eventmq.runtime.config import get_settings

logger = logging.getLogger("django_eventmq.client")


#: Pauses between looks for an outcome that arrives on another thread's socket, or
#: that an event loop awaits (seconds; doubling from the first to the most).
FIRST_PAUSE = 0.001
MAX_PAUSE = 0.02


def _pauses(timeout: float | None) -> Iterator[float]:
    """The pauses between looks for an outcome, until ``timeout`` seconds passed."""
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = FIRST_PAUSE
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return
        yield pause if left is None else min(pause, left)
        pause = min(pause * 2, MAX_PAUSE)


def _outcome_elsewhere(
    client: Client | ShardedClient, msgid: str, timeout: float | None
) -> Outcome | None:
    """Wait for the outcome of ``msgid`` on another thread's ``client``, looking with
    :meth:`.Client.outcome_now` and pausing between looks (None: not in time)."""
    for pause in _pauses(timeout):
        outcome = client.outcome_now(msgid)
        if outcome is not None:
            return outcome
        time.sleep(pause)
    return client.outcome_now(msgid)


class ResultNotReady(LookupError, EventMQError):
    """The job has no final result yet (or none was recorded)."""


# An outcome stands for a results table status (JobStatus), or for REJECTED,
# which only a handle that read the router's REJECT reports (no row is written
# for it, so it is no JobStatus).
REJECTED = "rejected"
# The status of a delay_on_commit job that no router will see (CommitHandle):
# its transaction rolled back, or its send at the commit failed. No row either.
ROLLED_BACK = "rolled_back"
NOT_SENT = "not_sent"


def outcome_status(outcome: Outcome) -> str:
    """The status of a job whose outcome is ``outcome``."""
    if isinstance(outcome, Reject):
        return REJECTED
    try:
        reply = decode_json(outcome.payload)
    except ProtocolError:
        return JobStatus.FAILED  # as outcome_value raises for it
    if not isinstance(reply, dict):
        return JobStatus.FAILED
    error = reply.get("error")
    if not error:
        return JobStatus.SUCCEEDED
    kind = error.get("type") if isinstance(error, dict) else None
    if kind == "Cancelled":
        return JobStatus.CANCELLED
    if kind == EXPIRED_ERROR:
        return JobStatus.EXPIRED
    # A job manager's timeout reply (outcomes.timeout_payload); a job that raised
    # TimeoutError itself has its message as the value.
    if kind == "TimeoutError" and reply.get("value") == "TimeoutError":
        return JobStatus.TIMED_OUT
    return JobStatus.FAILED


def outcome_value(outcome: Outcome) -> Any:
    """The return value an outcome carries, or the error it stands for, raised."""
    if isinstance(outcome, Reject):
        raise JobRejected(outcome.reason)
    try:
        reply = decode_json(outcome.payload)
    except ProtocolError as exc:
        raise ProtocolError(f"the reply to msgid={outcome.reply_to} is not JSON: {exc}") from exc
    if not isinstance(reply, dict):
        raise ProtocolError(f"the reply to msgid={outcome.reply_to} is not a JSON object")
    error = reply.get("error")
    if error:
        if not isinstance(error, dict):
            raise JobError("Error", str(error))
        # Not started before its expiry (the router's or a job manager's reply).
        cls = JobExpired if error.get("type") == EXPIRED_ERROR else JobError
        raise cls(
            str(error.get("type") or "Error"),
            str(error.get("message", "")),
            str(error.get("traceback") or ""),
        )
    return reply.get("value")


def settled_value(msgid: str, outcome: Outcome) -> Any:
    """:func:`outcome_value`, and for a job the outcome says expired unrun (it raises
    :class:`JobExpired`) an ``expired`` row in the results table (with Django): a
    router that dropped it has no database to say so. A job manager's row of it
    (it refused the job) stays. Best effort: the JobExpired is raised all the same."""
    try:
        return outcome_value(outcome)
    except JobExpired as expired:
        recorder = hooks.expired_recorder()
        if recorder is not None:
            try:
                recorder(msgid, expired.message)
            except Exception:  # a database error must not hide the job's JobExpired
                logger.exception("could not record job msgid=%s as expired", msgid)
        raise


class JobHandle(str):
    """A queued job's msgid, with ways to wait for, inspect and cancel the job."""

    __slots__ = ()
    #: False for jobs sent without ``reply_requested``: no outcome will come.
    expects_reply: ClassVar[bool] = True

    @property
    def msgid(self) -> str:
        return str(self)

    def wait(self, timeout: float | None = None) -> Any:
        """The job's return value, once the router sends it.

        Raises :class:`JobError` (with the remote exception's class, message
        and traceback) when the job failed, timed out or was cancelled,
        :class:`JobExpired` (a :class:`JobError`) when it was not started before
        its ``expires`` time and never ran, :class:`JobRejected` when the router refused it, and
        :class:`ResultTimeout` after ``timeout`` seconds. Any thread of the
        process that sent the job may call it: the outcome comes back on the
        sending thread's socket, which another thread reads when that one is
        not using it (and otherwise finds the outcome it filed).
        """
        self._check_reply()
        msgid = str(self)
        client, own = self._client()
        if own:
            outcome = client.outcome(msgid, timeout)
        else:
            outcome = _outcome_elsewhere(client, msgid, timeout)
        if outcome is None:
            raise ResultTimeout(f"no outcome for job {self} within {timeout}s")
        return settled_value(msgid, outcome)

    async def aresult(self, timeout: float | None = None) -> Any:
        """:meth:`wait` for async code (an ASGI view): awaits the outcome without
        blocking the event loop, from any task or thread of the sending process.

        It looks for the outcome, then sleeps on the loop (1 ms at first, at
        most 20 ms between looks), so it is seen within about 20 ms.
        """
        self._check_reply()
        msgid = str(self)
        client, _own = self._client()
        for pause in _pauses(timeout):
            if (outcome := client.outcome_now(msgid)) is not None:
                break
            await asyncio.sleep(pause)
        else:
            if (outcome := client.outcome_now(msgid)) is None:
                raise ResultTimeout(f"no outcome for job {self} within {timeout}s")
        try:
            return outcome_value(outcome)
        except JobExpired:
            # Its row is written with the ORM, which async code may not call.
            return await asyncio.to_thread(settled_value, msgid, outcome)

    def _client(self) -> tuple[Client | ShardedClient, bool]:
        """The client whose socket the outcome comes to, and whether it is this
        thread's (then it waits on it; else it looks with ``outcome_now``)."""
        settings = get_settings()
        sender = sender_of(str(self))
        if sender is not None and sender is not existing_client(settings.broker_addr):
            return sender, False
        return get_client(settings.broker_addr, send_timeout=settings.send_timeout), True

    def stream(self, timeout: float | None = None) -> Iterator[Any]:
        """Yield the job's partial replies as they arrive, in order; end at its outcome.

        Partials are what the job reported with ``progress(value)`` or
        yielded as a generator (at most ``PARTIAL_RATE`` a second; faster
        reports are coalesced, the latest kept). The iteration ends when the
        outcome arrives: ``.wait()`` then returns the final value at once.
        A failed, refused or cancelled job raises here as ``.wait()`` would
        (:class:`JobError`, :class:`JobRejected`). ``timeout`` bounds the wait
        for each next partial or the outcome (:class:`ResultTimeout`), not the
        whole stream. Partials are best effort: one lost on the way (the
        router restarted, the client's pipe was full) is not sent again.
        Call it in the thread that queued the job.
        """
        self._check_reply()  # now, not at the first next()
        return self._parts(timeout)

    def _parts(self, timeout: float | None) -> Iterator[Any]:
        settings = get_settings()
        client = get_client(settings.broker_addr, send_timeout=settings.send_timeout)
        msgid = str(self)
        while True:
            got = client.next_part(msgid, timeout)
            if got is None:
                raise ResultTimeout(f"nothing from job {self} within {timeout}s")
            partial, item = got
            if not partial:
                settled_value(msgid, item)  # raises for a failure or a rejection
                return
            yield item

    def _check_reply(self) -> None:
        if not self.expects_reply:
            raise EventMQError(
                f"job {self} was sent without reply_requested, so no outcome will arrive; "
                "use @job(reply_requested=True) or read .status"
            )

    def _seen(self) -> Outcome | None:
        """The outcome this thread's ``.wait()`` / ``.stream()`` already read, if any."""
        client = existing_client(get_settings().broker_addr)  # no socket made to look
        return None if client is None else client.seen(str(self))

    @property
    def status(self) -> str | None:
        """The job's status: ``queued``, ``running``, ``succeeded``, ``failed``,
        ``timed_out``, ``retrying``, ``cancelled``; ``None`` if none is recorded.

        Once ``.wait()`` or ``.stream()`` read the outcome (in this thread) it
        is the status that outcome stands for, ``rejected`` included (the
        router refused the job; the table has no row for it). Otherwise it is
        the results table's.
        """
        seen = self._seen()
        if seen is not None:
            return outcome_status(seen)
        return hooks.results_reader().status(str(self))

    @property
    def result(self) -> Any:
        """The job's return value; :class:`JobError` if it failed, :class:`JobRejected`
        if the router refused it (as ``.wait()`` raises).

        The outcome ``.wait()`` / ``.stream()`` read (in this thread), else the
        results table's: :class:`ResultNotReady` while the job has not
        finished (or nothing was recorded for it).
        """
        seen = self._seen()
        if seen is not None:
            return outcome_value(seen)
        return hooks.results_reader().result(str(self))

    def cancel(self) -> None:
        """Cancel the job: dropped if still queued, its process stopped if running."""
        cancel(str(self))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {str(self)!r}>"


class NoReplyHandle(JobHandle):
    """Handle of a job sent without ``reply_requested`` (``.wait()`` refuses)."""

    __slots__ = ()
    expects_reply: ClassVar[bool] = False


class CommitHandle(JobHandle):
    """Handle of a job sent when its transaction commits (``delay_on_commit``).

    Until it is sent there is nothing to wait for, so ``.wait()``, ``.stream()``
    and ``.result`` raise at once instead of timing out: :class:`ResultTimeout`
    while the transaction is still open (its commit cannot come while this
    thread waits), :class:`JobNotSent` once it rolled back or the send at the
    commit failed; ``.status`` is then ``rolled_back`` or ``not_sent``. A job
    whose outbox row a relay sends instead (``outbox``: the send at the commit
    failed) has ``.status`` and ``.result`` from the results table; ``.wait()``
    raises :class:`ResultTimeout` (its reply goes to the relay).
    """

    #: True while the job waits for its transaction's commit (None: not asked
    #: yet, as when no transaction was open and it was sent at once).
    pending: Callable[[], bool] | None = None
    _sent = False
    #: Why its send at the commit failed ("" if it did not).
    _failure = ""

    @classmethod
    def of(cls, msgid: str, sent_as: type[JobHandle]) -> CommitHandle:
        """The handle of ``msgid``, a job that ``.delay()`` would give a ``sent_as``."""
        return cls(msgid) if sent_as.expects_reply else NoReplyCommitHandle(msgid)

    def sent(self) -> None:
        self._sent = True

    def not_sent(self, error: Exception) -> None:
        """The send at the commit raised ``error``."""
        self._failure = f"{type(error).__name__}: {error}"

    def kept(self, error: Exception) -> None:
        """The send at the commit raised ``error``; the outbox keeps the job for a relay."""
        self._kept = f"{type(error).__name__}: {error}"

    #: Why the send at the commit failed, for a job its outbox row keeps ("" if none).
    _kept = ""

    def _unsent(self) -> EventMQError | None:
        """Why nothing can come for this job (None: it was sent)."""
        if self._sent:
            return None
        if self._kept:
            return ResultTimeout(
                f"job {self} was not sent at its commit ({self._kept}); its outbox row is "
                "sent by a scheduler, whose reply this thread cannot read: read "
                "handle.status / handle.result"
            )
        if self._failure:
            return JobNotSent(
                f"job {self} was not sent when its transaction committed ({self._failure}); "
                "sending it again with the same msgid is safe",
                msgid=str(self),
            )
        if self.pending is not None and self.pending():
            return ResultTimeout(
                f"job {self} is sent when its transaction commits, which it has not yet: "
                "nothing can come while this thread waits inside it (in a TestCase, run "
                "the commit's callbacks with captureOnCommitCallbacks(execute=True))"
            )
        return JobNotSent(
            f"job {self} was never sent: the transaction it was queued in with "
            "delay_on_commit() rolled back",
            msgid=str(self),
        )

    def wait(self, timeout: float | None = None) -> Any:
        error = self._unsent()
        if error is not None:
            raise error
        return super().wait(timeout)

    async def aresult(self, timeout: float | None = None) -> Any:
        error = self._unsent()
        if error is not None:
            raise error
        return await super().aresult(timeout)

    def stream(self, timeout: float | None = None) -> Iterator[Any]:
        error = self._unsent()
        if error is not None:
            raise error
        return super().stream(timeout)

    @property
    def status(self) -> str | None:
        """As :attr:`JobHandle.status`; ``rolled_back`` / ``not_sent`` for a job no
        router will see (None still while its transaction is open: nothing is recorded)."""
        error = self._unsent()
        if isinstance(error, JobNotSent):
            return NOT_SENT if self._failure else ROLLED_BACK
        return super().status

    @property
    def result(self) -> Any:
        error = self._unsent()
        if isinstance(error, JobNotSent):
            raise error
        return super().result


class NoReplyCommitHandle(CommitHandle):
    """A :class:`CommitHandle` of a job sent without ``reply_requested``."""

    expects_reply: ClassVar[bool] = False


class EagerHandle(JobHandle):
    """Handle of a job that already ran inline (``EAGER`` or no broker)."""

    _value: Any
    _partials: list[Any]
    #: False until a job queued for its transaction's commit ran (:meth:`at_commit`).
    _ran: bool = True
    #: What the job raised when it ran at the commit (re-raised by :meth:`wait`).
    _error: BaseException | None = None

    @classmethod
    def at_commit(cls, msgid: str) -> EagerHandle:
        """The handle of a job that runs inline when its transaction commits
        (``delay_on_commit`` with ``EAGER``): :meth:`took` or :meth:`failed` settle it."""
        handle = cls(msgid)
        handle._ran, handle._partials, handle._value = False, [], None
        return handle

    def took(self, ran: EagerHandle) -> None:
        """The commit ran the job: ``ran`` is what it returned."""
        self._value, self._partials, self._ran = ran._value, ran._partials, True

    def failed(self, error: BaseException) -> None:
        """The commit ran the job and it raised ``error``."""
        self._error, self._ran = error, True

    def _settled(self) -> None:
        if not self._ran:
            raise ResultTimeout(
                f"job {self.msgid} runs when its transaction commits, which it has not "
                "(in a TestCase, run the commit's callbacks with "
                "captureOnCommitCallbacks(execute=True))"
            )
        if self._error is not None:
            raise self._error

    @classmethod
    def ran(cls, msgid: str, value: Any) -> EagerHandle:
        """The handle of a job that returned ``value`` (a generator job is run to its end)."""
        handle = cls(msgid)
        handle._partials = []
        if isinstance(value, GeneratorType):
            while True:
                try:
                    handle._partials.append(next(value))
                except StopIteration as stop:
                    value = stop.value
                    break
        handle._value = value
        return handle

    def wait(self, timeout: float | None = None) -> Any:
        self._settled()
        return self._value

    async def aresult(self, timeout: float | None = None) -> Any:
        return self.wait(timeout)  # it ran already: nothing to wait for

    @property
    def status(self) -> str:
        """``succeeded``: it ran in ``.delay()`` (a failure raised there), or at its
        transaction's commit; ``queued`` before that commit, ``failed`` if it raised there."""
        if not self._ran:
            return JobStatus.QUEUED
        return JobStatus.FAILED if self._error is not None else JobStatus.SUCCEEDED

    @property
    def result(self) -> Any:
        self._settled()
        return self._value

    def stream(self, timeout: float | None = None) -> Iterator[Any]:
        """The values a generator job yielded (``progress()`` reports are not kept inline)."""
        self._settled()
        return iter(self._partials)


def cancel(job_msgid: str) -> None:
    """Cancel a job by msgid: it never runs if queued, its process is stopped if running."""
    settings = get_settings()
    if settings.run_inline:
        return  # it already ran
    get_client(settings.broker_addr, send_timeout=settings.send_timeout).cancel(job_msgid)
    recorder = hooks.cancel_recorder()
    if recorder is not None:
        recorder(job_msgid)
