"""Scheduling jobs over the wire: :func:`schedule`, :func:`unschedule` and schedule identity.

A schedule is identified like the reference does it - the SHA-1 of the
sorted-key JSON of the job body (``args, kwargs, class_args, class_kwargs,
path, callable``) - plus its timing, so one job can have two schedules.
Scheduling the same job with the same timing again updates that schedule;
an UNSCHEDULE without timing removes every schedule of the job body.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError, InvalidJob
from ..protocol import EMPTY_HEADERS, Headers, JobBody, parse_headers, parse_job
from ..protocol import constants as C
from ..protocol.messages import Schedule, Unschedule
from .client import get_client
from .config import get_settings
from .schedules import InvalidSchedule, Timing

#: Extra SCHEDULE header naming the cron timezone (``timezone:Europe/Berlin``).
#: The reference ignores headers it does not know; absent means UTC.
TIMEZONE_HEADER = "timezone"
#: The spec's 3-frame SCHEDULE has no timing frames; we accept the timing in
#: these headers there (``interval:60`` or ``cron:30 2 * * *``).
INTERVAL_HEADER = "interval"
CRON_HEADER = "cron"
_SCHEDULE_ONLY = (TIMEZONE_HEADER, INTERVAL_HEADER, CRON_HEADER)


def job_identity(body: JobBody) -> str:
    """The reference's schedule hash: the job body alone, timing left out."""
    text = json.dumps(
        {
            "args": list(body.args),
            "kwargs": body.kwargs,
            "class_args": list(body.class_args),
            "class_kwargs": body.class_kwargs,
            "path": body.path,
            "callable": body.callable,
        },
        sort_keys=True,
    )
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()


def schedule_identity(body: JobBody, timing: Timing) -> str:
    """Our schedule identity: the job body and the timing."""
    text = json.dumps({"job": job_identity(body), **timing.identity()}, sort_keys=True)
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()


def request_headers(headers: Headers) -> Headers:
    """The headers of the REQUESTs a schedule fires: the schedule-only ones removed."""
    extra = tuple(h for h in headers.extra if h.partition(":")[0] not in _SCHEDULE_ONLY)
    return headers.with_(nohaste=False, run_count=None, extra=extra)


def _header(headers: Headers, name: str) -> str | None:
    for item in headers.extra:
        key, sep, value = item.partition(":")
        if key == name and sep and value.strip():
            return value.strip()
    return None


def timezone_of(headers: Headers) -> str:
    return _header(headers, TIMEZONE_HEADER) or "UTC"


def _timing_from_headers(headers: Headers) -> Timing | None:
    interval_text = _header(headers, INTERVAL_HEADER)
    cron = _header(headers, CRON_HEADER)
    if interval_text is None and cron is None:
        return None
    interval: int | None = None
    if interval_text is not None:
        try:
            interval = int(interval_text)
        except ValueError:
            raise InvalidSchedule(
                f"header interval:{interval_text} is not a whole number of seconds"
            ) from None
    return Timing(interval=interval, cron=cron, timezone=timezone_of(headers) if cron else "UTC")


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """A SCHEDULE or UNSCHEDULE as the scheduler stores it.

    ``timing`` is None for an UNSCHEDULE that names no timing (remove every
    schedule of the job). ``headers`` are the REQUEST headers to fire with.
    """

    body: JobBody
    queue: str
    headers: Headers
    timing: Timing | None
    nohaste: bool = False
    run_count: int | None = None

    @property
    def job_key(self) -> str:
        return job_identity(self.body)

    @property
    def key(self) -> str:
        if self.timing is None:
            raise ValueError("a spec without timing has no schedule key")
        return schedule_identity(self.body, self.timing)

    @classmethod
    def from_message(cls, message: Schedule | Unschedule) -> ScheduleSpec:
        """Read a SCHEDULE/UNSCHEDULE; raises ``InvalidJob``/``InvalidSchedule`` when bad."""
        body = parse_job(message.body_text)
        timing: Timing | None
        if message.has_timing:
            timing = Timing(
                interval=message.interval,
                cron=message.cron,
                timezone=timezone_of(message.headers) if message.cron else "UTC",
            )
        else:  # the spec's 3-frame form
            timing = _timing_from_headers(message.headers)
        if timing is None and isinstance(message, Schedule):
            raise InvalidSchedule(
                "SCHEDULE names no timing: send QUEUE, HEADERS, INTERVAL, MSG, CRON with an "
                "interval > 0 or a cron expression, or put 'interval:N' / 'cron:EXPR' in the "
                "headers of the 3-frame form"
            )
        return cls(
            body=body,
            queue=message.queue,
            headers=request_headers(message.headers),
            timing=timing,
            nohaste=message.headers.nohaste,
            run_count=message.headers.run_count,
        )


JobRef = Callable[..., Any] | str


def job_body(
    func: JobRef,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    class_args: Sequence[Any] = (),
    class_kwargs: dict[str, Any] | None = None,
) -> JobBody:
    """The job body for ``func``: a ``@job``, a module-level function or ``"module.func"``."""
    if isinstance(func, str):
        path, sep, name = func.rpartition(".")
        if not sep:
            raise InvalidJob(f"job name {func!r} must be dotted: 'module.function'")
    else:
        path = getattr(func, "path", None) or func.__module__
        name = getattr(func, "callable_name", None) or func.__name__
    return JobBody(
        path=path,
        callable=name,
        args=tuple(args),
        kwargs=dict(kwargs or {}),
        class_args=tuple(class_args),
        class_kwargs=dict(class_kwargs or {}),
    )


def _headers(value: Headers | str | None, default: Headers) -> Headers:
    if value is None:
        return default
    return parse_headers(value) if isinstance(value, str) else value


def _broker() -> str:
    settings = get_settings()
    if not settings.broker_addr:
        raise ConfigurationError(
            "schedule()/unschedule() need a router: set BROKER_ADDR (schedules cannot run inline)"
        )
    return settings.broker_addr


def schedule(
    func: JobRef,
    *,
    interval_secs: int | None = None,
    cron: str | None = None,
    timezone: str = "UTC",
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    queue: str | None = None,
    headers: Headers | str | None = None,
    nohaste: bool = False,
    run_count: int | None = None,
    class_args: Sequence[Any] = (),
    class_kwargs: dict[str, Any] | None = None,
) -> str:
    """Ask the scheduler to run ``func`` every ``interval_secs`` or on ``cron``; returns the msgid.

    Without ``nohaste`` the first run is right away; ``run_count`` limits
    the number of runs. ``timezone`` is the cron's wall clock. Scheduling the
    same job and timing again updates the schedule.
    """
    Timing(interval=interval_secs, cron=cron, timezone=timezone)  # checks it all
    body = job_body(func, args, kwargs, class_args, class_kwargs)
    base = _headers(headers, getattr(func, "headers", EMPTY_HEADERS))
    extra = base.extra
    if cron is not None and timezone != "UTC":
        extra = (*extra, f"{TIMEZONE_HEADER}:{timezone}")
    wire_headers = base.with_(nohaste=nohaste, run_count=run_count, extra=extra)
    queue = queue or getattr(func, "queue", None) or C.DEFAULT_QUEUE_NAME
    settings = get_settings()
    client = get_client(_broker(), send_timeout=settings.send_timeout)
    return client.schedule(
        queue, body.encode(), interval=interval_secs, cron=cron, headers=wire_headers
    )


def unschedule(
    func: JobRef,
    *,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    interval_secs: int | None = None,
    cron: str | None = None,
    timezone: str = "UTC",
    queue: str | None = None,
    class_args: Sequence[Any] = (),
    class_kwargs: dict[str, Any] | None = None,
) -> str:
    """Remove the schedule of ``func`` with these arguments; returns the msgid.

    With a timing, only that schedule goes; without, every schedule of the
    job with these arguments.
    """
    body = job_body(func, args, kwargs, class_args, class_kwargs)
    headers = EMPTY_HEADERS
    if interval_secs is not None or cron is not None:
        Timing(interval=interval_secs, cron=cron, timezone=timezone)
        if cron is not None and timezone != "UTC":
            headers = headers.with_(extra=(f"{TIMEZONE_HEADER}:{timezone}",))
    queue = queue or getattr(func, "queue", None) or C.DEFAULT_QUEUE_NAME
    settings = get_settings()
    client = get_client(_broker(), send_timeout=settings.send_timeout)
    return client.unschedule(
        queue, body.encode(), interval=interval_secs, cron=cron, headers=headers
    )
