"""Tracing on the client: a ``send`` span around the hand-over of a job to the
socket, its trace context stamped in the job's headers (the job manager's
``run`` span continues it). Plugged in at "sending" (:mod:`.stages`) only
when tracing is on: :func:`~django_eventmq.runtime.tracing.send_span` gave a
span.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django_eventmq.runtime import tracing


def send_traced(
    span: tracing.SendSpan, send: Callable[..., None], headers: bytes, *args: Any
) -> None:
    """``send(headers, *args)`` with ``span``'s context stamped in ``headers``, inside
    the span (failed if the send raised)."""
    try:
        send(tracing.stamped(headers, span.stamp), *args)
    except BaseException as exc:
        span.fail(exc)
        raise
    finally:
        span.end()
