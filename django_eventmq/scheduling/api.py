"""Scheduling jobs over the wire: :func:`schedule` and :func:`unschedule`.

What identifies a schedule, and how a SCHEDULE message reads back, is in
:mod:`django_eventmq.scheduling.identity`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django_eventmq.client.jobs import Job
from django_eventmq.client.pool import get_client
from django_eventmq.errors import ConfigurationError
from django_eventmq.protocol import EMPTY_HEADERS, Headers, parse_headers
from django_eventmq.protocol import constants as C
from django_eventmq.runtime.config import get_settings
from django_eventmq.scheduling.identity import (
    TIMEZONE_HEADER,
    JobRef,
    job_body,
)
from django_eventmq.scheduling.timing import Timing


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
    same job and timing again updates the schedule. The runs of a unique job
    carry its key: the router refuses a run while the previous one is held.
    """
    Timing(interval=interval_secs, cron=cron, timezone=timezone)  # checks it all
    body = job_body(func, args, kwargs, class_args, class_kwargs)
    base = _headers(headers, getattr(func, "headers", EMPTY_HEADERS))
    if isinstance(func, Job):  # each run carries a unique job's key for these arguments
        base = func.unique_headers(base, tuple(args), dict(kwargs or {})) or base
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
