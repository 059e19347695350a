"""In a worker child: partial replies, what a running job reports before its final value.

A job reports with :func:`progress` (``django_eventmq.progress(value)``), or
by being a generator: each value it yields is a partial, its ``return``
value the final one. At most :data:`PARTIAL_RATE` reports a second per job
go on, twice bounded: in the worker child (:class:`PartialGate`, so a job
reporting per row costs a few microseconds a report, not a pipe write) and
in the job manager (:class:`.partials.Coalescer`, so no child can flood the router). A
report held back is replaced by the next one and sent when its turn comes;
the last report is always sent, before the job's outcome.

Outside a job manager (a job called directly, ``EAGER``) :func:`progress`
checks its value and does nothing else.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from typing import Any

from django_eventmq.errors import SerializationError
from django_eventmq.jobmanager.pipe import PARTIAL_INTERVAL as PARTIAL_INTERVAL
from django_eventmq.jobmanager.pipe import PARTIAL_RATE as PARTIAL_RATE
from django_eventmq.protocol import encode_json
from django_eventmq.protocol.extensions import MAX_PARTIAL_BYTES

#: Set by the worker child around each job: sends one encoded partial payload.
_reporter: Callable[[str], object] | None = None
#: The same for an async job running beside others on the child's event loop: set
#: in its task's own context, so each reports as itself (:mod:`.tasks`).
task_reporter: contextvars.ContextVar[Callable[[str], object] | None] = contextvars.ContextVar(
    "emq_task_reporter", default=None
)


def encode_partial(value: Any) -> str:
    """The PARTIAL payload for ``value``; :class:`SerializationError` if it cannot be sent."""
    try:
        text = encode_json({"value": value})
    except SerializationError as exc:
        raise SerializationError(f"progress value is {exc}") from None
    if len(text) > MAX_PARTIAL_BYTES:
        raise SerializationError(
            f"progress value is {len(text)} bytes as JSON, more than {MAX_PARTIAL_BYTES}; "
            "send big results as the job's return value"
        )
    return text


def progress(value: Any) -> None:
    """Report progress (or a partial result) of the running job to the client that waits.

    ``value`` must be JSON-serialisable (:class:`SerializationError`
    otherwise, raised in the job). The client reads the reports with
    ``handle.stream()``; the last one is also kept on the job's
    ``JobResult`` row (``progress``). Reports faster than
    :data:`PARTIAL_RATE` per second are coalesced (the latest wins).
    Outside a job run by a job manager it does nothing.
    """
    text = encode_partial(value)
    report = _reporter or task_reporter.get()
    if report is not None:
        report(text)


def set_reporter(report: Callable[[str], object] | None) -> None:
    """Where :func:`progress` sends from now on (the worker child sets it per job)."""
    global _reporter
    _reporter = report


class PartialGate:
    """In a worker child: lets one partial per ``interval`` through to the pipe.

    A report that comes too soon is held (a newer one replaces it); a daemon
    thread, started on the first hold, sends it when its turn comes, so a job
    that reports once more and then works for an hour still shows that
    report. :meth:`finish` sends what is held before the job's result. Sends
    happen under one lock, so a job's partials stay in order and before its
    result.
    """

    def __init__(
        self, send: Callable[[bytes, str], object], interval: float = PARTIAL_INTERVAL
    ) -> None:
        self._send = send
        self._interval = interval
        #: A plain lock under the condition: ``with self._lock`` is entered in C, where
        #: ``with self._cond`` calls two Python methods (twice per job, start and finish).
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._seq = b""
        self._held: str | None = None
        self._last = -interval
        self._thread: threading.Thread | None = None

    def start(self, seq: bytes) -> None:
        """Job ``seq`` starts: its reports go out as its own."""
        with self._lock:
            self._seq, self._held, self._last = seq, None, -self._interval

    def report(self, text: str) -> None:
        """One report of the running job (a :func:`progress` payload)."""
        now = time.monotonic()
        with self._lock:
            if not self._seq:
                return  # no job runs: a thread a finished job left behind reports late
            if self._held is None and now - self._last >= self._interval:
                self._last = now
                self._send(self._seq, text)
                return
            if self._held is None:
                self._cond.notify()  # the sender waits for something to hold
            self._held = text
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="emq-partials", daemon=True)
                self._thread.start()

    def finish(self) -> None:
        """The job is over: send its held report now (its result follows)."""
        with self._lock:
            text, self._held = self._held, None
            if text is not None:
                self._send(self._seq, text)
            self._seq = b""

    def _run(self) -> None:
        cond = self._cond
        with cond:
            while True:
                while self._held is None:
                    cond.wait()
                delay = self._last + self._interval - time.monotonic()
                if delay > 0:
                    cond.wait(delay)  # then look again: finish() may have sent it
                    continue
                text, self._held = self._held, None
                self._last = time.monotonic()
                self._send(self._seq, text)
