"""Schedule identity and the SCHEDULE message read back: pure, shared by router and scheduler.

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

from django_eventmq.errors import InvalidJob
from django_eventmq.protocol import Headers, JobBody, parse_job
from django_eventmq.protocol.messages import Schedule, Unschedule
from django_eventmq.scheduling.timing import InvalidSchedule, Timing

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
