"""``@job``: register a function as a job and give it ``.delay()``.

The decorated object is still callable directly with the function's own
signature (kept for type checkers through ``ParamSpec``). ``.delay_in()``,
``.send(countdown=...)`` and ``.send(eta=...)`` set the ``delay-until``
header (the router holds the job until then); headers given to ``.send()``
are merged over the decorator's options, field by field.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, Generic, ParamSpec, TypeVar, Unpack, overload

from django_eventmq.client.handles import CommitHandle, EagerHandle, JobHandle, NoReplyHandle
from django_eventmq.client.job_headers import HeaderChanges as HeaderChanges
from django_eventmq.client.job_headers import JobOptions as JobOptions
from django_eventmq.client.job_headers import _unique_option
from django_eventmq.client.job_headers import due_time as due_time
from django_eventmq.client.job_headers import expiry_time as expiry_time
from django_eventmq.client.job_headers import merged_headers as merged_headers
from django_eventmq.client.job_headers import rate_headers as rate_headers
from django_eventmq.client.pool import get_client, remember_sender
from django_eventmq.client.workflows import Signature
from django_eventmq.errors import (
    ConfigurationError,
    EventMQError,
    JobRejected,
    ProtocolError,
    SerializationError,
)
from django_eventmq.protocol import Headers, JobBody, new_msgid
from django_eventmq.protocol import constants as C
from django_eventmq.protocol.payload import compact_json
from django_eventmq.protocol.status import refused_for_now
from django_eventmq.protocol.unique import unique_key
from django_eventmq.runtime import (
    hooks,
    job_context,
    job_events,
    registry,
    retry_policy,
    routes,
    tracing,
)
from django_eventmq.runtime.config import get_settings
from django_eventmq.runtime.logs import job_debug
from django_eventmq.runtime.settings import Settings
from django_eventmq.scheduling.timing import Periodic, crontab

logger = logging.getLogger("django_eventmq.client")
T = TypeVar("T")


def send_at_commit(
    on_commit: Callable[[Callable[[], object]], T],
    send: Callable[[], object],
    what: str,
    then: str,
    failed: Callable[[Exception], None] | None = None,
) -> T:
    """Call ``send`` when the open transaction commits (``on_commit``, whose answer
    is returned); at once with none open, its error then the caller's. At the commit
    an error is logged, with ``what`` was not sent and ``then`` what to do, and
    given to ``failed``, not raised: raised there it would end Django's run of the
    transaction's callbacks, and what was queued after it would never be sent."""
    at_once = True  # on_commit calls it before returning when no transaction is open

    def run() -> None:
        try:
            send()
        except Exception as exc:
            if at_once:
                raise
            if failed is not None:
                failed(exc)
            logger.error(
                "%s was not sent when its transaction committed: %s: %s. The "
                "transaction's writes are committed; %s",
                what,
                type(exc).__name__,
                exc,
                then,
                exc_info=not isinstance(exc, EventMQError),
            )

    answer = on_commit(run)
    at_once = False
    return answer


_declared_lock = threading.Lock()
#: Schedules declared with ``@job(schedule=...)`` / ``@job(cron=...)``, in
#: declaration order; ``emq_scheduler`` syncs them into the table at start-up.
_declared: dict[str, tuple[Job[Any, Any], tuple[Periodic, ...]]] = {}


#: Every ``@job`` of this process by its name (the signals' sender).
_jobs: dict[str, Job[Any, Any]] = {}


def registered_job(name: str) -> Job[Any, Any] | None:
    """The :class:`Job` ``@job`` made for job ``name`` in this process, if any."""
    return _jobs.get(name)


def declared_schedules() -> list[tuple[Job[Any, Any], Periodic]]:
    """Every ``(job, periodic)`` declared in code so far."""
    with _declared_lock:
        return [(j, p) for j, periodics in _declared.values() for p in periodics]


def _periodics(
    schedule: Periodic | Sequence[Periodic] | None, cron: str | None
) -> tuple[Periodic, ...]:
    found: list[Periodic] = []
    if isinstance(schedule, Periodic):
        found.append(schedule)
    elif schedule is not None:
        found.extend(schedule)
    if cron is not None:
        found.append(crontab(cron))
    for item in found:
        if not isinstance(item, Periodic):
            raise ConfigurationError(
                f"@job schedule= takes every(...)/crontab(...) results, got {item!r}"
            )
    return tuple(found)


_encode = compact_json
#: What follows the arguments (and keyword arguments) in a job body.
_BODY_TAIL = ',"class_args":[],"class_kwargs":{}}]'
#: ... in the body of a call without keyword arguments.
_BODY_TAIL_NO_KWARGS = ',"kwargs":{}' + _BODY_TAIL


P = ParamSpec("P")
R = TypeVar("R")


class Job(Generic[P, R]):
    """A function registered as a job. Call it to run it here; ``.delay()`` to queue it."""

    def __init__(
        self,
        func: Callable[P, R],
        *,
        queue: str | None = None,
        schedule: Periodic | Sequence[Periodic] | None = None,
        cron: str | None = None,
        **options: Unpack[JobOptions],
    ) -> None:
        qualname = getattr(func, "__qualname__", "")
        if "<locals>" in qualname or "." in qualname:
            raise ConfigurationError(
                f"@job needs a module-level function; {qualname!r} is nested or a method"
            )
        if func.__module__ == "__main__":
            raise ConfigurationError(
                f"@job function {func.__name__!r} is defined in __main__, which a job manager "
                "cannot import; move it into a module"
            )
        if queue is not None and not queue:
            raise ConfigurationError("@job queue name is empty")
        self.func = func
        #: The queue ``@job`` named (None: ``ROUTES`` say, else ``default``).
        self.given_queue = queue
        #: ``(settings, queue, its bytes)``: what ``ROUTES`` said under these settings.
        self._routed: tuple[Settings, str, bytes] | None = None
        self.path = func.__module__
        self.callable_name = func.__name__
        unknown = sorted(set(options) - JobOptions.__optional_keys__)
        if unknown:
            raise ConfigurationError(
                f"@job {qualname}: unknown option(s) {', '.join(unknown)}; it takes queue, "
                f"schedule, cron, {', '.join(sorted(JobOptions.__optional_keys__))}"
            )
        fields: dict[str, Any] = dict(options)
        outbox = fields.pop("outbox", None)
        if outbox is not None and not isinstance(outbox, bool):
            raise ConfigurationError(f"@job {qualname}: outbox= takes True, False or None")
        #: Whether ``.delay_on_commit()`` goes through the outbox table (None: ``OUTBOX``).
        self.outbox: bool | None = outbox
        #: (seconds, key callable) of a unique job (None: not unique).
        self.unique = _unique_option(qualname, fields.pop("unique_for", None), fields)
        try:
            policy = retry_policy.policy_from_options(fields, fields.get("retry_count", 0))
        except ConfigurationError as exc:
            raise ConfigurationError(f"@job {qualname}: {exc}") from exc
        expires = fields.pop("expires", None)
        if isinstance(expires, datetime):
            raise ConfigurationError(
                f"@job {qualname}: expires= takes seconds after each send here; "
                "give a datetime to send(..., expires=) instead"
            )
        try:
            #: Seconds after sending before the job expires (None: never).
            self.expires_after = expiry_time(expires, 0.0)
        except ConfigurationError as exc:
            raise ConfigurationError(f"@job {qualname}: {exc}") from exc
        try:
            extra = rate_headers(
                registry.job_name(self.path, self.callable_name),
                fields.pop("rate_limit", None),
                fields.pop("rate_key", None),
            )
            self.headers = Headers(**fields, extra=extra)
        except ProtocolError as exc:
            raise ConfigurationError(f"@job {qualname}: {exc}") from exc
        self.name = registry.register(func, self.path, self.callable_name)
        _jobs[self.name] = self
        #: How a failure is retried (None: any exception, the global back-off).
        self.retry_policy = policy
        retry_policy.register(self.name, policy)
        #: Schedules declared in code for this job (see ``declared_schedules``).
        self.schedules = _periodics(schedule, cron)
        with _declared_lock:
            if self.schedules:
                _declared[self.name] = (self, self.schedules)
            else:
                _declared.pop(self.name, None)
        # The parts of the job body that never change, encoded once: .delay()
        # only encodes the arguments (the enqueue hot path).
        self._body_head = (
            f'["run",{{"callable":{_encode(self.callable_name)},"path":{_encode(self.path)},'
        )
        self._queue_b = queue.encode() if queue is not None else b""
        self._headers_b = self.headers.encode().encode()
        self._guarantee = self.headers.guarantee
        self._handle_cls = _handle_class(self.headers)
        #: The body of a call without arguments (a periodic job's usual call).
        self._body_bare = self.encode_body((), {})
        functools.update_wrapper(self, func)

    @property
    def queue(self) -> str:
        """The queue ``.delay()`` sends to: ``@job(queue=)``, else the first matching
        ``ROUTES`` glob's, else ``default``."""
        if self.given_queue is not None:
            return self.given_queue
        return self._route(get_settings())[0]

    def _route(self, settings: Settings) -> tuple[str, bytes]:
        """``(queue, its bytes)`` ``ROUTES`` give this job, worked out once per settings."""
        routed = self._routed
        if routed is None or routed[0] is not settings:
            queue = routes.route(self.name, settings.routes) or C.DEFAULT_QUEUE_NAME
            routed = self._routed = (settings, queue, queue.encode())
        return routed[1], routed[2]

    def encode_body(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """The JSON job body for these arguments; ``TypeError`` if they are not JSON."""
        try:
            if not kwargs and type(kwargs) is dict:
                # Positional arguments only: the rest of the body is constant.
                return f'{self._body_head}"args":{_encode(args)}{_BODY_TAIL_NO_KWARGS}'
            # One encoder call for both ('{"args":[...],"kwargs":{...}}' less its
            # braces): the call, not the work, is most of a small body's cost.
            both = _encode({"args": args, "kwargs": kwargs})
            return f"{self._body_head}{both[1:-1]}{_BODY_TAIL}"
        except (TypeError, ValueError) as exc:
            raise SerializationError(
                f"{self.name}: arguments are not JSON-serialisable: {exc}"
            ) from exc

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """This job with these arguments, to run later in a workflow
        (``chain``, ``group``, ``chord``): an immutable :class:`Signature`."""
        return Signature.of(
            self.path, self.callable_name, args, kwargs, queue=self.queue, headers=self.headers
        )

    def body(self, *args: Any, **kwargs: Any) -> JobBody:
        """The job body that runs this function with these arguments."""
        return JobBody(path=self.path, callable=self.callable_name, args=args, kwargs=kwargs)

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """Queue the job; returns its handle, which is its msgid (a ``str``).

        Arguments must be JSON-serialisable: anything else raises
        ``TypeError`` (:class:`SerializationError`) here, before anything is
        sent. With ``EAGER`` (or no ``BROKER_ADDR``) the job runs now, in
        this process. Otherwise it returns once the job is queued toward a
        connected router, and raises :class:`BrokerUnavailable` when none is
        connected within ``SEND_TIMEOUT``; a ``guarantee`` job returns once
        the router has acknowledged (stored) it, and raises
        :class:`BrokerUnavailable` when it did not after ``ACK_RETRIES`` resends.
        """
        # send() without its options: the decorator's headers, encoded once in __init__.
        body_text = self.encode_body(args, kwargs) if args or kwargs else self._body_bare
        headers = self.unique_headers(self._expiring(), args, kwargs)
        return self._send_encoded(body_text, args, kwargs, None, headers, new_msgid())

    def _expiring(self) -> Headers | None:
        """The decorator's headers with its expiry counted from now (None: it has none)."""
        if self.expires_after is None:
            return None
        return self.headers.with_(expires=time.time() + self.expires_after)

    async def adelay(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """:meth:`delay` for async code (an ASGI view): the send runs in a thread
        (``asyncio.to_thread``), so a wait for a router (``SEND_TIMEOUT``) or for
        a ``guarantee`` job's ACK never blocks the event loop. ``await
        handle.aresult(timeout=...)`` waits for its value."""
        return await asyncio.to_thread(self.delay, *args, **kwargs)

    async def asend(
        self, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None, **options: Any
    ) -> JobHandle:
        """:meth:`send` for async code, as :meth:`adelay` is :meth:`delay`."""
        return await asyncio.to_thread(self.send, args, kwargs, **options)

    def delay_in(
        self, seconds: float | timedelta, /, *args: P.args, **kwargs: P.kwargs
    ) -> JobHandle:
        """Queue the job to run ``seconds`` from now (``send(countdown=seconds)``).

        The router holds it until then (and keeps it across restarts); with
        ``EAGER`` it runs now. A negative delay raises :class:`ConfigurationError`.
        """
        return self.send(args, kwargs, countdown=seconds)

    def delay_on_commit(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """Queue the job when the current database transaction commits.

        Nothing is sent if it rolls back. Outside a transaction it is sent
        at once. The arguments are checked now; the handle (msgid) is usable
        at once, its ``.wait()`` after the commit: before it, or once the
        transaction rolled back, ``.wait()`` raises at once (see
        :class:`~.handles.CommitHandle`).
        """
        on_commit = hooks.on_commit()
        body_text = self.encode_body(args, kwargs)  # TypeError now, not at commit
        msgid = new_msgid()

        def send() -> JobHandle:
            headers = self.unique_headers(self._expiring(), args, kwargs)
            return self._send_encoded(body_text, args, kwargs, None, headers, msgid)

        settings = get_settings()
        if not settings.run_inline:
            handle = CommitHandle.of(msgid, self._handle_cls)
            if settings.outbox if self.outbox is None else self.outbox:
                self._through_outbox(on_commit, body_text, args, kwargs, msgid, handle)
                return handle

            def send_now() -> None:
                send()
                handle.sent()

            handle.pending = send_at_commit(
                on_commit,
                send_now,
                f"job {self.name} msgid={msgid}",
                "send it again (the same msgid is safe)",
                failed=handle.not_sent,
            )
            return handle
        # EAGER: the job runs at the commit, its handle settled then; what it raises
        # reaches the caller, as from .delay() (docs/retries.md).
        eager = EagerHandle.at_commit(msgid)

        def run() -> None:
            try:
                ran = send()
            except Exception as exc:
                eager.failed(exc)
                raise
            if isinstance(ran, EagerHandle):
                eager.took(ran)

        on_commit(run)
        return eager

    def _through_outbox(
        self,
        on_commit: hooks.OnCommit,
        body_text: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        msgid: str,
        handle: CommitHandle,
    ) -> None:
        """``delay_on_commit`` with the outbox: the job's row is written now, in the
        caller's transaction; at the commit it is sent, guaranteed, and its row deleted
        once the router acknowledged it. A row left (this process died, the router was
        down) is sent by a scheduler (``scheduling/relay.py``); the router takes its
        msgid once."""
        box = hooks.outbox()
        headers = (self.unique_headers(self._expiring(), args, kwargs) or self.headers).with_(
            guarantee=True
        )
        box.keep(msgid, self.queue, headers.encode(), body_text)

        def kept(exc: Exception) -> None:
            # Not raised, even with no transaction open: the row is committed and will
            # be sent; a caller that sent the job again would send it twice.
            handle.kept(exc)
            logger.warning(
                "job %s msgid=%s was not sent (%s: %s); its outbox row stays and a "
                "scheduler (emq_scheduler) sends it",
                self.name,
                msgid,
                type(exc).__name__,
                exc,
            )

        def send_now() -> None:
            try:
                self._send_encoded(body_text, args, kwargs, None, headers, msgid)
            except JobRejected as exc:
                if not refused_for_now(exc.reason):
                    box.sent(msgid)  # refused for good: a relay would be refused too
                    raise
                kept(exc)
                return
            except Exception as exc:
                kept(exc)
                return
            handle.sent()
            try:
                box.sent(msgid)
            except Exception as exc:  # sent: a relay sends it again, the router takes it once
                logger.warning(
                    "job %s msgid=%s was sent but its outbox row was not deleted (%s: %s)",
                    self.name,
                    msgid,
                    type(exc).__name__,
                    exc,
                )

        handle.pending = send_at_commit(
            on_commit,
            send_now,
            f"job {self.name} msgid={msgid}",
            "the router refused it, so it will not run",
            failed=handle.not_sent,
        )

    def send(
        self,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        queue: str | None = None,
        headers: HeaderChanges | None = None,
        msgid: str | None = None,
        countdown: float | timedelta | None = None,
        eta: datetime | None = None,
        expires: float | timedelta | datetime | None = None,
    ) -> JobHandle:
        """Queue the job with explicit options (queue, headers, msgid, a delay, an expiry).

        ``headers`` (a :class:`Headers`, or a mapping of its field names to
        values) are merged over the decorator's (:func:`merged_headers`);
        ``countdown`` (seconds, or a timedelta) or ``eta`` (an aware datetime)
        hold the job in the router until then; ``expires`` (seconds from now,
        a timedelta or an aware datetime; default: the decorator's) is when a
        job not started yet is dropped instead of run.
        """
        kwargs = kwargs or {}
        body_text = self.encode_body(args, kwargs)  # TypeError before anything is sent
        if (
            headers is not None
            or countdown is not None
            or eta is not None
            or expires is not None
            or self.expires_after is not None
        ):
            headers = self.headers_for(headers, countdown=countdown, eta=eta, expires=expires)
        headers = self.unique_headers(headers, args, kwargs)
        return self._send_encoded(body_text, args, kwargs, queue, headers, msgid or new_msgid())

    def headers_for(
        self,
        headers: HeaderChanges | None = None,
        *,
        countdown: float | timedelta | None = None,
        eta: datetime | None = None,
        expires: float | timedelta | datetime | None = None,
        now: float | None = None,
    ) -> Headers:
        """The headers a :meth:`send` with these options carries.

        ``headers`` merged over the decorator's (:func:`merged_headers`), then
        ``delay-until`` from ``countdown`` (seconds after ``now``, the wall
        clock by default) or ``eta``; giving one of them and
        a ``delay_until`` in ``headers`` too raises :class:`ConfigurationError`.
        ``expires`` (or else the decorator's, counted from ``now``) sets the
        ``expires`` time unless ``headers`` set one.
        """
        merged = self.headers if headers is None else merged_headers(self.headers, headers)
        now = time.time() if now is None else now
        if merged.expires is None or expires is not None:
            at = expiry_time(expires, now)
            if at is None and self.expires_after is not None:
                at = now + self.expires_after
            if at is not None:
                merged = merged.with_(expires=at)
        due = due_time(countdown, eta, now)
        if due is None:
            return merged
        if merged.delay_until is not None:
            raise ConfigurationError("give countdown=/eta= or headers with delay_until, not both")
        return merged.with_(delay_until=due)

    def unique_headers(
        self, headers: Headers | None, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Headers | None:
        """``headers`` (None: the decorator's) with this unique job's key for these
        arguments; ``headers`` as given when the job is not unique, or when they
        name a key already (with the decorator's ``unique_for`` if they set none).
        For REQUESTs built by hand (``send_many``)."""
        if self.unique is None:
            return headers
        seconds, key_of = self.unique
        if headers is not None and headers.unique_key is not None:  # a key given: kept
            return headers if headers.unique_for else headers.with_(unique_for=seconds)
        if key_of is None:
            try:
                part = json.dumps([args, kwargs], sort_keys=True, separators=(",", ":"))
            except TypeError:  # a dict with keys of mixed types cannot be sorted
                part = json.dumps([args, kwargs], separators=(",", ":"))
        else:
            part = key_of(*args, **kwargs)
            if not isinstance(part, str):
                raise ConfigurationError(
                    f"{self.name}: unique_key= returned {part!r}; it must return a str"
                )
        base = self.headers if headers is None else headers
        return base.with_(unique_key=unique_key(self.name, part), unique_for=seconds)

    def _send_encoded(
        self,
        body_text: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        queue: str | None,
        headers: Headers | None,
        msgid: str,
    ) -> JobHandle:
        settings = get_settings()
        if queue is not None:
            queue_b = queue.encode()
        elif self.given_queue is not None:
            queue, queue_b = self.given_queue, self._queue_b
        else:
            queue, queue_b = self._route(settings)
        if settings.run_inline:
            context = self._context(msgid, queue, headers, args, kwargs)
            token = job_context.enter(job_context.Lazy(context))
            try:
                value = self.func(*args, **kwargs)
                if inspect.iscoroutine(value):  # an async job: run it here, as a worker would
                    value = asyncio.run(value)
            finally:
                job_context.leave(token)
            return EagerHandle.ran(msgid, value)
        client = get_client(settings.broker_addr, send_timeout=settings.send_timeout)
        if headers is None:
            headers_b, guarantee, handle_cls = self._headers_b, self._guarantee, self._handle_cls
        else:
            headers_b = headers.encode().encode()
            guarantee, handle_cls = headers.guarantee, _handle_class(headers)
            # A unique job waits for the router's answer: an ACK, or JobNotUnique.
            guarantee = guarantee or headers.unique_key is not None
        # The send span (None: tracing off); its trace context goes in the headers.
        span = tracing.send_span(queue, msgid, self.name)
        if span is not None:
            headers_b = tracing.stamped(headers_b, span.stamp)
        try:
            if guarantee:
                client.send_request_guaranteed(
                    msgid.encode(),
                    queue_b,
                    headers_b,
                    body_text.encode(),
                    ack_timeout=settings.ack_timeout,
                    retries=settings.ack_retries,
                )
            else:
                client.send_request_frames(msgid.encode(), queue_b, headers_b, body_text.encode())
        except BaseException as exc:
            if span is not None:
                span.fail(exc)
            raise
        finally:
            if span is not None:
                span.end()
        if logger.isEnabledFor(logging.DEBUG):
            job_debug(logger, "sent", msgid, queue, job=self.name)
        if handle_cls.expects_reply:  # its .wait() may come from another thread
            remember_sender(msgid, client)
        events = job_events.listener  # None: nobody listens (the Django signals)
        if events is not None:
            events.sent(job_context.Lazy(self._context(msgid, queue, headers, args, kwargs)))
        return handle_cls(msgid)

    def _context(
        self,
        msgid: str,
        queue: str,
        headers: Headers | None,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Callable[[], job_context.JobContext]:
        """What makes the context of this job as sent (its first attempt)."""

        def build() -> job_context.JobContext:
            sent = self.headers if headers is None else headers
            return job_context.JobContext(
                msgid=msgid,
                name=self.name,
                queue=queue,
                retries_left=sent.retry_count,
                headers=sent,
                args=tuple(args),
                kwargs=dict(kwargs),
            )

        return build

    def __repr__(self) -> str:
        return f"<Job {self.name} queue={self.queue!r}>"


def _handle_class(headers: Headers) -> type[JobHandle]:
    return JobHandle if headers.reply_requested else NoReplyHandle


@overload
def job(func: Callable[P, R], /) -> Job[P, R]: ...


@overload
def job(
    *,
    queue: str | None = ...,
    schedule: Periodic | Sequence[Periodic] | None = ...,
    cron: str | None = ...,
    **options: Unpack[JobOptions],
) -> Callable[[Callable[P, R]], Job[P, R]]: ...


def job(
    func: Callable[P, R] | None = None,
    /,
    *,
    queue: str | None = None,
    schedule: Periodic | Sequence[Periodic] | None = None,
    cron: str | None = None,
    **options: Unpack[JobOptions],
) -> Job[P, R] | Callable[[Callable[P, R]], Job[P, R]]:
    """Register a module-level function as a job: ``@job`` or ``@job(queue="email")``.

    Without ``queue=`` the ``ROUTES`` setting picks the queue by the job's dotted
    name (``default`` when no glob matches); ``.send(queue=)`` wins over both.

    The :class:`JobOptions` become the job's headers, kept however it is
    sent: ``reply_requested``, ``guarantee``, ``retry_count``, ``timeout``
    (seconds, then the job manager kills it), ``soft_timeout`` (seconds, then
    it raises inside the job; less than ``timeout``), ``priority`` (higher
    is handed out first within its queue) and ``expires`` (seconds after
    sending: a job not started by then is never run); a bad one raises
    :class:`ConfigurationError`. ``schedule=every(60)`` /
    ``schedule=crontab("30 2 * * *", timezone=...)`` (or a list of them) and
    ``cron="0 9 * * *"`` declare periodic runs. ``retry_on``, ``retry_backoff``,
    ``retry_jitter`` and ``retry_max_delay`` shape how its ``retry_count`` retries
    are used (docs/retries.md).
    """

    def wrap(f: Callable[P, R]) -> Job[P, R]:
        return Job(f, queue=queue, schedule=schedule, cron=cron, **options)

    return wrap(func) if func is not None else wrap
