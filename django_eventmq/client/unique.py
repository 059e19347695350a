"""Unique jobs on the client: ``@job(unique_for=, unique_key=)`` put a key of the
job's arguments in the ``unique-key`` header (and ``unique-for``); the router
refuses a job whose key another job holds (docs/unique-jobs.md).

A stage of the send path (:mod:`.stages`). A unique job's send waits for the
router's answer (:func:`waits_for_answer`): an ACK, or ``JobNotUnique``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django_eventmq.client.job_headers import Call
from django_eventmq.errors import ConfigurationError
from django_eventmq.protocol import Headers
from django_eventmq.protocol.unique import unique_key


class Unique:
    """The unique key of each send of job ``name``, held ``seconds`` after acceptance."""

    __slots__ = ("key_of", "name", "seconds")

    def __init__(self, name: str, seconds: int, key_of: Callable[..., str] | None) -> None:
        self.name = name
        self.seconds = seconds
        #: The key's part from the arguments (None: all of them, as JSON).
        self.key_of = key_of

    def headers(self, headers: Headers, call: Call | None, now: float | None) -> Headers:
        """``headers`` with the key for the ``call``'s arguments; as given when they
        name a key already (with ``unique_for`` if they set none), or when the call is
        not known (None)."""
        if call is None:
            return headers
        if headers.unique_key is not None:  # a key given: kept
            return headers if headers.unique_for else headers.with_(unique_for=self.seconds)
        return headers.with_(
            unique_key=unique_key(self.name, self.part(*call)), unique_for=self.seconds
        )

    def part(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """What the key is made of: ``unique_key=``'s answer, or the arguments as JSON."""
        key_of = self.key_of
        if key_of is None:
            try:
                return json.dumps([args, kwargs], sort_keys=True, separators=(",", ":"))
            except TypeError:  # a dict with keys of mixed types cannot be sorted
                return json.dumps([args, kwargs], separators=(",", ":"))
        part = key_of(*args, **kwargs)
        if not isinstance(part, str):
            raise ConfigurationError(
                f"{self.name}: unique_key= returned {part!r}; it must return a str"
            )
        return part


def waits_for_answer(headers: Headers) -> bool:
    """A job with a unique key waits for the router's answer, as a ``guarantee`` job:
    refused, it raises ``JobNotUnique``."""
    return headers.unique_key is not None


def from_options(qualname: str, name: str, fields: dict[str, Any]) -> Unique | None:
    """The unique stage of ``@job(unique_for=, unique_key=)`` (whole seconds, key
    callable); None when neither is given. Takes both out of ``fields``."""
    unique_for = fields.pop("unique_for", None)
    key_of = fields.pop("unique_key", None)
    if unique_for is None and key_of is None:
        return None
    if key_of is not None and not callable(key_of):
        raise ConfigurationError(
            f"@job {qualname}: unique_key= takes a callable of the job's arguments that "
            f"returns a str, got {key_of!r}"
        )
    seconds = unique_for.total_seconds() if isinstance(unique_for, timedelta) else unique_for
    if seconds is None:
        return Unique(name, 0, key_of)
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
        or seconds < 0
    ):
        raise ConfigurationError(
            f"@job {qualname}: unique_for= takes seconds >= 0 (a number or a timedelta), "
            f"got {unique_for!r}"
        )
    return Unique(name, math.ceil(seconds), key_of)
