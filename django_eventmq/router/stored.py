"""Jobs as the router's journal stores them, turned back into jobs to hand out.

A stored job is its REQUEST's fields (:class:`.journal.Row`); handing it out
again rebuilds the frames a client sent, with an ``attempt:K`` header when
it is a retry (see :mod:`.dispatch`, "Attempts").
"""

from __future__ import annotations

from django_eventmq.protocol import constants as C
from django_eventmq.protocol.headers import Headers, parse_headers
from django_eventmq.router.journal.store import Row
from django_eventmq.router.routing import Job

_VERSION = C.PROTOCOL_VERSION_B
_REQUEST = C.REQUEST.encode()
#: The header a retried REQUEST carries (read by ``lifecycle.attempt_of``).
ATTEMPT = b"attempt"


def with_attempt(headers: bytes, attempt: int) -> bytes:
    """The header frame with ``attempt:K`` in place of any ``attempt:N`` (none for K <= 1).

    Edited as text so every other header reaches the job manager as the client wrote it.
    """
    items = [
        item for item in headers.split(b",") if item and item.split(b":", 1)[0].strip() != ATTEMPT
    ]
    if attempt > 1:
        items.append(b"%s:%d" % (ATTEMPT, attempt))
    return b",".join(items)


def job_from_row(row: Row, now: float) -> Job:
    """A stored job, ready to be handed out again (a retry says which attempt it is)."""
    headers = _headers(row.headers)
    frames = [
        b"",
        _VERSION,
        _REQUEST,
        row.msgid.encode(),
        row.queue.encode(),
        with_attempt(row.headers, row.attempts + 1) if row.attempts else row.headers,
        row.body,
    ]
    return Job(
        row.msgid,
        row.queue,
        frames,
        row.guarantee,
        now,
        seq=row.seq,
        priority=-row.nprio,
        client=row.client,
        reply=headers.reply_requested,
        retry_count=headers.retry_count,
        timeout=headers.timeout,
        deaths=row.deaths,
        attempts=row.attempts,
    )


def _headers(raw: bytes) -> Headers:
    try:
        return parse_headers(raw.decode())
    except (ValueError, UnicodeDecodeError):
        return parse_headers("")
