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
import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, Generic, ParamSpec, TypeVar, Unpack, overload

from django_eventmq.client import outbox, stages
from django_eventmq.client.commit import send_at_commit
from django_eventmq.client.connection import Client
from django_eventmq.client.expiry import Expiry, expiry_time
from django_eventmq.client.handles import CommitHandle, EagerHandle, JobHandle, NoReplyHandle
from django_eventmq.client.job_headers import HeaderChanges as HeaderChanges
from django_eventmq.client.job_headers import JobOptions as JobOptions
from django_eventmq.client.job_headers import due_time as due_time
from django_eventmq.client.job_headers import merged_headers as merged_headers
from django_eventmq.client.pool import get_client, remember_sender
from django_eventmq.client.routing import Route
from django_eventmq.client.shards import ShardedClient
from django_eventmq.client.stages import build_headers, waits_for_answer
from django_eventmq.client.traced_send import send_traced
from django_eventmq.client.unique import Unique
from django_eventmq.client.workflows import Signature
from django_eventmq.errors import (
    ConfigurationError,
    ProtocolError,
    SerializationError,
)
from django_eventmq.protocol import Headers, JobBody, new_msgid
from django_eventmq.protocol.payload import compact_json
from django_eventmq.runtime import (
    hooks,
    job_context,
    job_events,
    registry,
    retry_policy,
    tracing,
)
from django_eventmq.runtime.config import get_settings
from django_eventmq.runtime.logs import job_debug
from django_eventmq.runtime.settings import Settings
from django_eventmq.scheduling.timing import Periodic, crontab

logger = logging.getLogger("django_eventmq.client")
T = TypeVar("T")


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
        self.path = func.__module__
        self.callable_name = func.__name__
        unknown = sorted(set(options) - JobOptions.__optional_keys__)
        if unknown:
            raise ConfigurationError(
                f"@job {qualname}: unknown option(s) {', '.join(unknown)}; it takes queue, "
                f"schedule, cron, {', '.join(sorted(JobOptions.__optional_keys__))}"
            )
        fields: dict[str, Any] = dict(options)
        #: Whether ``.delay_on_commit()`` goes through the outbox table (None: ``OUTBOX``).
        self.outbox = outbox.from_options(qualname, fields)
        name = registry.job_name(self.path, self.callable_name)
        #: The features that set headers of each send, in order (:mod:`.stages`).
        self.header_stages = stages.header_stages(qualname, name, fields)
        try:
            policy = retry_policy.policy_from_options(fields, fields.get("retry_count", 0))
        except ConfigurationError as exc:
            raise ConfigurationError(f"@job {qualname}: {exc}") from exc
        try:
            extra = stages.fixed_headers(name, fields)  # takes its options out first
            self.headers = Headers(**fields, extra=extra)
        except ProtocolError as exc:
            raise ConfigurationError(f"@job {qualname}: {exc}") from exc
        self.name = registry.register(func, self.path, self.callable_name)
        self._route = Route(self.name)
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
        return self._route.queue(get_settings())[0]

    @property
    def expires_after(self) -> float | None:
        """Seconds after sending before the job expires (None: never; ``@job(expires=)``)."""
        found = [s for s in self.header_stages if isinstance(s, Expiry)]
        return found[0].after if found else None

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
        headers = None
        if self.header_stages:  # building headers: the features this job uses
            headers = build_headers(self.header_stages, self.headers, (args, kwargs))
        return self._send_encoded(body_text, args, kwargs, None, headers, new_msgid())

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
            headers = build_headers(self.header_stages, self.headers, (args, kwargs))
            return self._send_encoded(body_text, args, kwargs, None, headers, msgid)

        settings = get_settings()
        if not settings.run_inline:
            handle = CommitHandle.of(msgid, self._handle_cls)
            if settings.outbox if self.outbox is None else self.outbox:
                headers = build_headers(self.header_stages, self.headers, (args, kwargs))
                outbox.send_through(
                    on_commit,
                    lambda sent: self._send_encoded(body_text, args, kwargs, None, sent, msgid),
                    self.name,
                    self.queue,
                    headers.with_(guarantee=True),
                    body_text,
                    msgid,
                    handle,
                )
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
        now = None
        if headers is not None or countdown is not None or eta is not None or expires is not None:
            now = time.time()
            headers = self._given_headers(headers, countdown, eta, expires, now)
        if self.header_stages:  # building headers: the features this job uses
            sent = self.headers if headers is None else headers
            headers = build_headers(self.header_stages, sent, (args, kwargs), now)
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
        now = time.time() if now is None else now
        merged = self._given_headers(headers, countdown, eta, expires, now)
        # The arguments are not known: a unique job's key is not in these.
        return build_headers(self.header_stages, merged, None, now)

    def _given_headers(
        self,
        headers: HeaderChanges | None,
        countdown: float | timedelta | None,
        eta: datetime | None,
        expires: float | timedelta | datetime | None,
        now: float,
    ) -> Headers:
        """The decorator's headers with what a :meth:`send` gives: ``headers``, a delay,
        an expiry (the features' stages come after)."""
        merged = self.headers if headers is None else merged_headers(self.headers, headers)
        if expires is not None:
            merged = merged.with_(expires=expiry_time(expires, now))
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
        stage = next((s for s in self.header_stages if isinstance(s, Unique)), None)
        if stage is None:
            return headers
        return stage.headers(self.headers if headers is None else headers, (args, kwargs), None)

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
            queue, queue_b = self._route.queue(settings)
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
            guarantee = waits_for_answer(headers)
            handle_cls = _handle_class(headers)
        # Sending: inside a send span when tracing is on (None: off).
        span = tracing.send_span(queue, msgid, self.name)
        if span is None:
            _hand_over(headers_b, client, settings, guarantee, msgid, queue_b, body_text)
        else:
            send_traced(
                span, _hand_over, headers_b, client, settings, guarantee, msgid, queue_b, body_text
            )
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


def _hand_over(
    headers_b: bytes,
    client: Client | ShardedClient,
    settings: Settings,
    guarantee: bool,
    msgid: str,
    queue_b: bytes,
    body_text: str,
) -> None:
    """Give the job to ``client``: guaranteed (until ACKed) or not."""
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
