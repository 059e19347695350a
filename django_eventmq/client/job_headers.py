"""The headers and times a job's options become.

What ``@job(...)`` options (:class:`JobOptions`) and ``send(...)`` options turn
into: the ``delay-until`` time, the headers ``send(headers=...)`` merges over
the decorator's. Pure functions; ``client/jobs.py`` calls them and re-exports
them. The options of a feature are read by its own module (:mod:`.stages`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypedDict

from django_eventmq.errors import ConfigurationError
from django_eventmq.protocol import Headers

_DEFAULT_HEADERS = Headers()


class JobOptions(TypedDict, total=False):
    """The ``@job(...)`` options that become the job's headers (defaults: ``Headers()``'s)."""

    reply_requested: bool
    guarantee: bool
    retry_count: int
    timeout: int
    soft_timeout: int | None
    priority: int
    #: Seconds (or a timedelta) after sending: a job not started by then is not run.
    expires: float | timedelta | None
    #: At most N hand-outs per period across all job managers (router-wide):
    #: ``"100/m"``, ``"10/5s"``, or a whole number per second (docs/rate-limits.md).
    rate_limit: str | int | None
    #: What the limit counts under (default: the job's dotted name); jobs that share a
    #: key share one limit.
    rate_key: str | None
    #: Unique jobs (docs/unique-jobs.md): seconds (or a timedelta) after acceptance
    #: during which another job with the same key is refused (and always while this
    #: one is queued or running); the key: a callable of the job's arguments.
    unique_for: float | timedelta | None
    unique_key: Callable[..., str] | None
    #: Retry policy (runtime/retry_policy.py; not headers, kept in the code): the
    #: exceptions that retry, the first back-off, jitter (True/"full"/"equal"), the cap.
    retry_on: type[BaseException] | tuple[type[BaseException], ...] | None
    retry_backoff: float | None
    retry_jitter: bool | str
    retry_max_delay: float | None
    #: ``.delay_on_commit()`` writes the job to the outbox table in the caller's
    #: transaction first (None: the ``OUTBOX`` setting decides; docs/durability.md).
    outbox: bool | None


def due_time(countdown: float | timedelta | None, eta: datetime | None, now: float) -> float | None:
    """The ``delay-until`` unix time of ``countdown=`` (seconds after ``now``) or ``eta=``.

    None when neither delays the job (or ``countdown`` is 0). A negative
    countdown, a naive ``eta`` or both at once raise :class:`ConfigurationError`;
    an ``eta`` already past is kept (the router hands such a job out at once).
    """
    if countdown is not None and eta is not None:
        raise ConfigurationError("give countdown= or eta=, not both")
    if countdown is not None:
        seconds = countdown.total_seconds() if isinstance(countdown, timedelta) else countdown
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not math.isfinite(seconds)
        ):
            raise ConfigurationError(
                f"countdown= takes seconds (a number or a timedelta), got {countdown!r}"
            )
        if seconds < 0:
            raise ConfigurationError(
                f"countdown= must be >= 0 seconds, got {countdown!r}; "
                "to run the job now, leave countdown= out"
            )
        return now + seconds if seconds else None
    if eta is not None:
        if not isinstance(eta, datetime):
            raise ConfigurationError(f"eta= takes an aware datetime, got {eta!r}")
        if eta.utcoffset() is None:
            raise ConfigurationError(
                f"eta= must be an aware datetime (with a tzinfo), got the naive {eta!r}; "
                "pass e.g. django.utils.timezone.now() + timedelta(minutes=5) "
                "or datetime.now(UTC) + ..."
            )
        return eta.timestamp()
    return None


#: A call's arguments: ``(args, kwargs)``.
Call = tuple[tuple[Any, ...], dict[str, Any]]

#: What ``send(headers=...)`` takes: a :class:`Headers`, or field names and values.
HeaderChanges = Headers | Mapping[str, Any]

_HEADER_FIELDS = frozenset(item.name for item in dataclasses.fields(Headers))


def merged_headers(base: Headers, explicit: HeaderChanges) -> Headers:
    """``base`` (the decorator's options) with every field ``explicit`` sets.

    A :class:`Headers`: a field left at its default keeps ``base``'s value
    (so ``Headers(priority=5)`` keeps the decorator's ``timeout``); unknown
    headers (``extra``) are joined, ``explicit``'s winning by name. A mapping
    of field names (``{"timeout": 0, "reply_requested": False}``): each field
    it names is set as given, a default value too, so it can turn an option off.
    """
    changes: dict[str, Any]
    if isinstance(explicit, Headers):
        changes = {}
        for name in _HEADER_FIELDS - {"extra"}:
            value = getattr(explicit, name)
            if value != getattr(_DEFAULT_HEADERS, name):
                changes[name] = value
        if explicit.extra:
            named = {extra.partition(":")[0] for extra in explicit.extra}
            kept = tuple(extra for extra in base.extra if extra.partition(":")[0] not in named)
            changes["extra"] = kept + explicit.extra
    else:
        unknown = sorted(set(explicit) - _HEADER_FIELDS)
        if unknown:
            raise ConfigurationError(
                f"headers= names no header field {', '.join(unknown)}; "
                f"the fields are {', '.join(sorted(_HEADER_FIELDS))}"
            )
        changes = dict(explicit)
    return base.with_(**changes) if changes else base
