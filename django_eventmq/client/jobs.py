"""``@job``: register a function as a job and give it ``.delay()``.

The decorated object is still callable directly with the function's own
signature (kept for type checkers through ``ParamSpec``).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, ParamSpec, TypeVar, overload

from django_eventmq.client.connection import get_client
from django_eventmq.client.handles import EagerHandle, JobHandle, NoReplyHandle
from django_eventmq.errors import ConfigurationError, SerializationError
from django_eventmq.protocol import Headers, JobBody, new_msgid
from django_eventmq.protocol import constants as C
from django_eventmq.protocol.payload import compact_json
from django_eventmq.runtime import hooks, registry
from django_eventmq.runtime.config import get_settings
from django_eventmq.runtime.logs import job_debug
from django_eventmq.scheduling.timing import Periodic, crontab

logger = logging.getLogger("django_eventmq.client")

_declared_lock = threading.Lock()
#: Schedules declared with ``@job(schedule=...)`` / ``@job(cron=...)``, in
#: declaration order; ``emq_scheduler`` syncs them into the table at start-up.
_declared: dict[str, tuple[Job[Any, Any], tuple[Periodic, ...]]] = {}


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

P = ParamSpec("P")
R = TypeVar("R")


class Job(Generic[P, R]):
    """A function registered as a job. Call it to run it here; ``.delay()`` to queue it."""

    def __init__(
        self,
        func: Callable[P, R],
        *,
        queue: str = C.DEFAULT_QUEUE_NAME,
        reply_requested: bool = False,
        guarantee: bool = False,
        retry_count: int = 0,
        timeout: int = 0,
        schedule: Periodic | Sequence[Periodic] | None = None,
        cron: str | None = None,
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
        if not queue:
            raise ConfigurationError("@job queue name is empty")
        self.func = func
        self.queue = queue
        self.path = func.__module__
        self.callable_name = func.__name__
        self.headers = Headers(
            reply_requested=reply_requested,
            guarantee=guarantee,
            retry_count=retry_count,
            timeout=timeout,
        )
        self.name = registry.register(func, self.path, self.callable_name)
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
        self._queue_b = queue.encode()
        self._headers_b = self.headers.encode().encode()
        self._guarantee = guarantee
        self._handle_cls = _handle_class(self.headers)
        functools.update_wrapper(self, func)

    def encode_body(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """The JSON job body for these arguments; ``TypeError`` if they are not JSON."""
        try:
            # One encoder call for both ('{"args":[...],"kwargs":{...}}' less its
            # braces): the call, not the work, is most of a small body's cost.
            both = _encode({"args": args, "kwargs": kwargs})
            return f'{self._body_head}{both[1:-1]},"class_args":[],"class_kwargs":{{}}}}]'
        except (TypeError, ValueError) as exc:
            raise SerializationError(
                f"{self.name}: arguments are not JSON-serialisable: {exc}"
            ) from exc

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

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
        return self.send(args, kwargs)

    def delay_on_commit(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """Queue the job when the current database transaction commits.

        Nothing is sent if it rolls back. Outside a transaction it is sent
        at once. The arguments are checked now; the handle (msgid) is usable
        at once, its ``.wait()`` after the commit.
        """
        on_commit = hooks.on_commit()
        body_text = self.encode_body(args, kwargs)  # TypeError now, not at commit
        msgid = new_msgid()
        on_commit(lambda: self._send_encoded(body_text, args, kwargs, None, None, msgid))
        return self._handle_cls(msgid)

    def send(
        self,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        queue: str | None = None,
        headers: Headers | None = None,
        msgid: str | None = None,
    ) -> JobHandle:
        """Queue the job with explicit options (queue, headers, msgid)."""
        kwargs = kwargs or {}
        body_text = self.encode_body(args, kwargs)  # TypeError before anything is sent
        return self._send_encoded(body_text, args, kwargs, queue, headers, msgid or new_msgid())

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
        if settings.run_inline:
            return EagerHandle.ran(msgid, self.func(*args, **kwargs))
        client = get_client(settings.broker_addr, send_timeout=settings.send_timeout)
        queue_b = self._queue_b if queue is None else queue.encode()
        if headers is None:
            headers_b, guarantee, handle_cls = self._headers_b, self._guarantee, self._handle_cls
        else:
            headers_b = headers.encode().encode()
            guarantee, handle_cls = headers.guarantee, _handle_class(headers)
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
        job_debug(logger, "sent", msgid, queue or self.queue, job=self.name)
        return handle_cls(msgid)

    def __repr__(self) -> str:
        return f"<Job {self.name} queue={self.queue!r}>"


def _handle_class(headers: Headers) -> type[JobHandle]:
    return JobHandle if headers.reply_requested else NoReplyHandle


@overload
def job(func: Callable[P, R], /) -> Job[P, R]: ...


@overload
def job(
    *,
    queue: str = ...,
    reply_requested: bool = ...,
    guarantee: bool = ...,
    retry_count: int = ...,
    timeout: int = ...,
    schedule: Periodic | Sequence[Periodic] | None = ...,
    cron: str | None = ...,
) -> Callable[[Callable[P, R]], Job[P, R]]: ...


def job(
    func: Callable[P, R] | None = None,
    /,
    *,
    queue: str = C.DEFAULT_QUEUE_NAME,
    reply_requested: bool = False,
    guarantee: bool = False,
    retry_count: int = 0,
    timeout: int = 0,
    schedule: Periodic | Sequence[Periodic] | None = None,
    cron: str | None = None,
) -> Job[P, R] | Callable[[Callable[P, R]], Job[P, R]]:
    """Register a module-level function as a job: ``@job`` or ``@job(queue="email")``.

    ``schedule=every(60)`` / ``schedule=crontab("30 2 * * *", timezone=...)``
    (or a list of them) and ``cron="0 9 * * *"`` declare periodic runs.
    """

    def wrap(f: Callable[P, R]) -> Job[P, R]:
        return Job(
            f,
            queue=queue,
            reply_requested=reply_requested,
            guarantee=guarantee,
            retry_count=retry_count,
            timeout=timeout,
            schedule=schedule,
            cron=cron,
        )

    return wrap(func) if func is not None else wrap
