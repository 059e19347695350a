"""Jobs as the router's journal stores them, turned back into jobs to hand out.

A stored job is its REQUEST's fields (:class:`.schema.Row`); handing it out
again rebuilds the frames a client sent, with an ``attempt:K`` header when
it is a retry (see :mod:`.book`, "Attempts").
"""

from __future__ import annotations

from django_eventmq.protocol.frame_fields import request_frames
from django_eventmq.protocol.headers import Headers, parse_headers, with_attempt
from django_eventmq.router.journal.store import Row
from django_eventmq.router.routing import RoutedJob


def jobs_from_rows(rows: list[Row], now: float) -> list[RoutedJob]:
    """:func:`job_from_row` for many rows, each header frame parsed once (the jobs
    of a queue mostly share theirs)."""
    parsed: dict[bytes, Headers] = {}
    jobs = []
    for row in rows:
        headers = parsed.get(row.headers)
        if headers is None:
            headers = parsed[row.headers] = _headers(row.headers)
        jobs.append(job_from_row(row, now, headers))
    return jobs


def job_from_row(row: Row, now: float, headers: Headers | None = None) -> RoutedJob:
    """A stored job, ready to be handed out again (a retry says which attempt it is);
    ``headers``: its header frame parsed, if it was."""
    if headers is None:
        headers = _headers(row.headers)
    frames = request_frames(
        row.msgid.encode(),
        row.queue.encode(),
        with_attempt(row.headers, row.attempts + 1) if row.attempts else row.headers,
        row.body,
    )
    return RoutedJob(
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
