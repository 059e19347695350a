"""The named points of the client's send path, and the features plugged into them.

A job goes through these points, in order; a feature is one module that
plugs into the points it needs, so ``client/jobs.py`` names none of them:

``options`` (``@job(...)``, once)
    each feature takes its options out of the decorator's and returns its
    stage for this job, or None when the job does not use it
    (:func:`header_stages`): ``expires=`` (:mod:`.expiry`), ``unique_for=`` /
    ``unique_key=`` (:mod:`.unique`); ``rate_limit=`` / ``rate_key=`` become
    fixed headers (:func:`fixed_headers`, :mod:`.rate_limits`); ``outbox=``
    picks the path at the commit (:mod:`.outbox`).
``queue`` (each send)
    the queue ``@job(queue=)`` named, else the one ``ROUTES`` give
    (:mod:`.routing`).
``building headers`` (each send)
    the job's header stages, in order: the expiry counted from now, the
    unique key of these arguments (:func:`build_headers`). A job with none
    pays one check.
``sending`` (the hand-over to the socket)
    a ``send`` span around it when tracing is on (:mod:`.traced_send`).
``sent``
    the ``job_sent`` signal when something listens (``runtime/job_events``).
``acknowledged`` (a guaranteed send returned)
    the outbox row is deleted (:mod:`.outbox`).

Workflow members are sent by :mod:`.workflows`, with headers of their own.
"""

from __future__ import annotations

from typing import Any, Protocol

from django_eventmq.client import expiry, rate_limits, unique
from django_eventmq.client.job_headers import Call
from django_eventmq.protocol import Headers


class HeaderStage(Protocol):
    """A feature that sets headers of each send of a job ("building headers")."""

    def headers(self, headers: Headers, call: Call | None, now: float | None) -> Headers:
        """``headers`` with this feature's, for a ``call`` of the job (None: not known
        yet, as in ``Job.headers_for``) at ``now`` (the wall clock; None: read it if
        needed)."""
        ...


def header_stages(qualname: str, name: str, fields: dict[str, Any]) -> tuple[HeaderStage, ...]:
    """The header stages of job ``name`` (``@job`` on ``qualname``) for its options,
    taking theirs out of ``fields``; only those it uses."""
    found: list[HeaderStage | None] = [
        expiry.from_options(qualname, fields),
        unique.from_options(qualname, name, fields),
    ]
    return tuple(stage for stage in found if stage is not None)


def fixed_headers(name: str, fields: dict[str, Any]) -> tuple[str, ...]:
    """The extra headers job ``name``'s options fix for every send (a rate limit's),
    taking those options out of ``fields``."""
    return rate_limits.from_options(name, fields)


def build_headers(
    stages: tuple[HeaderStage, ...], headers: Headers, call: Call | None, now: float | None = None
) -> Headers:
    """``headers`` through each stage in turn."""
    for stage in stages:
        headers = stage.headers(headers, call, now)
    return headers


def waits_for_answer(headers: Headers) -> bool:
    """A send with these headers waits for the router's answer: a ``guarantee`` job,
    or a unique one (refused, it raises ``JobNotUnique``)."""
    return headers.guarantee or unique.waits_for_answer(headers)
