"""The running job's own context: :func:`current_job` (msgid, queue, attempt, ...).

A worker child sets it around each job it runs (``jobmanager/worker_process.py``) in a
:class:`contextvars.ContextVar`, so an ``async def`` job's task (which copies
the context it was created in) and every job of a generator or plain function
see their own. Outside a job it is None.

The child gets what the job manager knows about the job on the job's pipe
frame, as one line (:func:`encode_line`); it is parsed, and the
:class:`JobContext` built, only when something asks (``current_job()``, a
signal receiver): a job nobody asks about pays two ``ContextVar`` calls.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django_eventmq.protocol.headers import EMPTY_HEADERS, Headers, parse_headers
from django_eventmq.protocol.payload import JobBody, decode_json, encode_json


@dataclass(frozen=True, slots=True, kw_only=True)
class JobContext:
    """What a job knows about its own run (``django_eventmq.current_job()``)."""

    #: The job's id: what ``.delay()`` returned, the results row's key.
    msgid: str
    #: Its dotted name, ``module.function`` as ``@job`` registered it.
    name: str
    #: The queue it was sent to.
    queue: str
    #: Which run this is: 1 the first time, 2 on the first retry...
    attempt: int = 1
    #: How many more times it runs if this run fails (its ``retry_count`` less the
    #: retries already used).
    retries_left: int = 0
    #: The headers it was sent with (``headers.retry_count``, ``timeout``, ``priority``,
    #: ``expires``...; ``extra`` keeps the ones we do not model).
    headers: Headers = EMPTY_HEADERS
    #: Its arguments, as the job received them (decoded from JSON).
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


def retries_left(attempt: int, retry_count: int) -> int:
    """Runs left after a failure of run ``attempt`` of a job with ``retry_count`` retries."""
    return max(0, retry_count - attempt + 1)


def encode_line(msgid: str, queue: str, attempt: int, headers: str) -> bytes:
    """The context line a job manager sends its child with a job.

    ``attempt<TAB>msgid<TAB>queue<TAB>headers``; fields that hold a tab, a line
    break or the frame's ``\\x1e`` of their own go as a JSON array instead (it
    starts with ``[``, never a digit; JSON escapes control characters).
    """
    text = f"{attempt}\t{msgid}\t{queue}\t{headers}"
    if text.count("\t") != 3 or "\n" in text or "\x1e" in text:
        text = encode_json([attempt, msgid, queue, headers])
    return text.encode()


def _decode_line(line: bytes) -> tuple[int, str, str, str]:
    """``(attempt, msgid, queue, headers)`` from :func:`encode_line`'s bytes."""
    if not line:  # a frame without one (a test driving a child by hand)
        return 1, "", "", ""
    text = line.decode()
    if text.startswith("["):
        attempt, msgid, queue, headers = decode_json(text, "job context")
        return int(attempt), str(msgid), str(queue), str(headers)
    attempt_text, msgid, queue, headers = text.split("\t", 3)
    return int(attempt_text), msgid, queue, headers


class Running:
    """A job a worker runs: its context line and body, made a :class:`JobContext` when asked."""

    __slots__ = ("_body", "_built", "_line")

    def __init__(self, line: bytes, body: JobBody) -> None:
        self._line = line
        self._body = body
        self._built: JobContext | None = None

    def context(self) -> JobContext:
        """The job's :class:`JobContext` (built on the first call)."""
        built = self._built
        if built is None:
            attempt, msgid, queue, header_text = _decode_line(self._line)
            try:
                headers = parse_headers(header_text)
            except ValueError:  # ProtocolError: the job manager took them; keep what parses
                headers = EMPTY_HEADERS
            body = self._body
            built = self._built = JobContext(
                msgid=msgid,
                name=body.name,
                queue=queue,
                attempt=attempt,
                retries_left=retries_left(attempt, headers.retry_count),
                headers=headers,
                args=body.args,
                kwargs=body.kwargs,
            )
        return built


class Lazy:
    """A job whose context ``build`` makes when asked (an EAGER run, a job just sent)."""

    __slots__ = ("_build", "_built")

    def __init__(self, build: Callable[[], JobContext]) -> None:
        self._build = build
        self._built: JobContext | None = None

    def context(self) -> JobContext:
        if self._built is None:
            self._built = self._build()
        return self._built


_current: contextvars.ContextVar[Running | Lazy | None] = contextvars.ContextVar(
    "django_eventmq_current_job", default=None
)


def current_job() -> JobContext | None:
    """The job running here (its msgid, queue, attempt, retries left, headers), or None.

    Inside a job run by a worker (plain, generator or ``async def``: each async
    job sees its own) or run inline with ``EAGER``. Threads a job starts do not
    inherit it (pass what they need).
    """
    running = _current.get()
    return None if running is None else running.context()


def enter(running: Running | Lazy) -> contextvars.Token[Running | Lazy | None]:
    """Make ``running`` the current job; give the token to :func:`leave` when it ends."""
    return _current.set(running)


def leave(token: contextvars.Token[Running | Lazy | None]) -> None:
    """The job of :func:`enter`'s ``token`` is over."""
    _current.reset(token)
