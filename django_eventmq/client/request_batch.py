"""The pieces of a guaranteed bulk send around :class:`.bulk.Pipeline`.

:func:`encode_requests`: REQUESTs as the encoded fields a pipeline sends;
:func:`check_window`: the checks of a pipeline's window, timeouts and batch
size; :func:`batch_limits`: the size of a BATCH under the router's FEATURES.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from django_eventmq.protocol import Request
from django_eventmq.protocol.batch import MAX_BATCH_JOBS


def encode_requests(
    requests: Iterable[Request | tuple[bytes, bytes, bytes, bytes]],
) -> Iterator[tuple[bytes, bytes, bytes, bytes]]:
    """``(msgid, queue, headers, body)`` for REQUEST messages or already encoded fields."""
    for request in requests:
        if isinstance(request, Request):
            yield (
                request.msgid.encode(),
                request.queue.encode(),
                request.headers.encode().encode(),
                request.body_text.encode(),
            )
        else:
            yield request


def check_window(window: int, ack_timeout: float, give_up: float, batch: int = 0) -> None:
    """Raise ``ValueError`` for a window, timeouts or batch size a pipeline cannot work with."""
    if window < 1:
        raise ValueError(f"window must be at least 1, got {window}")
    if ack_timeout <= 0 or give_up <= 0:
        raise ValueError("ack_timeout and give_up must be positive")
    if not 0 <= batch <= MAX_BATCH_JOBS:
        raise ValueError(f"batch must be 0 (REQUESTs only) to {MAX_BATCH_JOBS}, got {batch}")


def _whole(value: object, default: int) -> int:
    """``value`` if it is a whole number >= 1 (from a peer's FEATURES), else ``default``."""
    return value if type(value) is int and value >= 1 else default


def batch_limits(
    features: Mapping[str, Any], batch: int, window: int, max_bytes: int
) -> tuple[int, int]:
    """Jobs and bytes per BATCH under the router's FEATURES: at most ``batch`` jobs
    and ``max_bytes``, and within the router's own bounds (``batch_jobs``,
    ``batch_bytes``)."""
    jobs = _whole(features.get("batch_jobs"), MAX_BATCH_JOBS)
    # Half the window at most, so that one batch fills while another is in flight.
    nbytes = _whole(features.get("batch_bytes"), max_bytes)
    return max(1, min(batch, jobs, window // 2)), min(max_bytes, nbytes - 1)  # 1: the newline
