"""The pieces of a guaranteed bulk send around :class:`.bulk.Pipeline`.

:func:`encode_requests`: REQUESTs as the encoded fields a pipeline sends;
:func:`check_window`: the checks of a pipeline's window, timeouts and batch
size; ``_Batch``: a BATCH in flight; ``_whole``: a bound from the router's
FEATURES.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from django_eventmq.protocol import Request
from django_eventmq.protocol.batch import MAX_BATCH_JOBS, pack_jobs


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


class _Batch:
    """A BATCH in flight: its jobs not answered yet (msgid -> (queue, headers, body))."""

    __slots__ = ("first_sent", "frame", "jobs", "packed", "sent_at")

    def __init__(self, jobs: dict[bytes, tuple[bytes, bytes, bytes]], now: float) -> None:
        self.jobs = jobs
        self.frame = b""
        #: Jobs in ``frame``; fewer left in ``jobs`` means some were refused since.
        self.packed = 0
        self.sent_at = now
        self.first_sent = now

    def pack(self) -> bytes:
        """The JOBS frame of the jobs still waiting (packed again only if some left)."""
        if self.packed != len(self.jobs):
            self.frame = pack_jobs([(m, *rest) for m, rest in self.jobs.items()])
            self.packed = len(self.jobs)
        return self.frame


def _whole(value: object, default: int) -> int:
    """``value`` if it is a whole number >= 1 (from a peer's FEATURES), else ``default``."""
    return value if type(value) is int and value >= 1 else default
