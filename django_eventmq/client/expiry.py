"""Expiry on the client: ``@job(expires=)`` and ``send(expires=)`` become the
``expires`` header, the time after which a job not started yet is dropped
instead of run (the router and the job manager check it; docs/expiry.md).

A stage of the send path (:mod:`.stages`): the decorator's expiry is counted
from each send.
"""

from __future__ import annotations

import math
import time
from datetime import datetime, timedelta
from typing import Any

from django_eventmq.client.job_headers import Call
from django_eventmq.errors import ConfigurationError
from django_eventmq.protocol import Headers


def expiry_time(expires: float | timedelta | datetime | None, now: float) -> float | None:
    """The ``expires`` unix time of ``expires=``: seconds (or a timedelta) after ``now``,
    or an aware datetime. None for None; anything else raises :class:`ConfigurationError`.
    """
    if expires is None:
        return None
    if isinstance(expires, datetime):
        if expires.utcoffset() is None:
            raise ConfigurationError(
                f"expires= must be an aware datetime (with a tzinfo), got the naive {expires!r}; "
                "pass e.g. django.utils.timezone.now() + timedelta(minutes=5), or seconds"
            )
        return expires.timestamp()
    seconds = expires.total_seconds() if isinstance(expires, timedelta) else expires
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ConfigurationError(
            f"expires= takes seconds (a number or a timedelta) or an aware datetime, "
            f"got {expires!r}"
        )
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigurationError(
            f"expires= must be a finite number of seconds > 0, got {expires!r}; "
            "for a job that never expires, leave expires= out"
        )
    return now + seconds


class Expiry:
    """``@job(expires=)``: each send's headers expire ``after`` seconds from then,
    unless they name an expiry of their own."""

    __slots__ = ("after",)

    def __init__(self, after: float) -> None:
        #: Seconds after sending before the job expires.
        self.after = after

    def headers(self, headers: Headers, call: Call | None, now: float | None) -> Headers:
        if headers.expires is not None:
            return headers
        return headers.with_(expires=(time.time() if now is None else now) + self.after)


def from_options(qualname: str, fields: dict[str, Any]) -> Expiry | None:
    """The expiry stage of ``@job(expires=)`` (None: the job never expires); takes
    ``expires`` out of ``fields``."""
    expires = fields.pop("expires", None)
    if isinstance(expires, datetime):
        raise ConfigurationError(
            f"@job {qualname}: expires= takes seconds after each send here; "
            "give a datetime to send(..., expires=) instead"
        )
    try:
        after = expiry_time(expires, 0.0)
    except ConfigurationError as exc:
        raise ConfigurationError(f"@job {qualname}: {exc}") from exc
    return None if after is None else Expiry(after)
