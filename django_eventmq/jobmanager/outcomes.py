"""What a job manager says about a finished job: reply payloads and outcome records.

The reply payload is the text a client gets (in a REPLY for a reference
router, inside DONE for ours): ``{"value": ...}`` for a result, plus
``"error": {"type", "message", "traceback"}`` when the job did not succeed.

Outcome records go to the hooks module's ``record_results(records)`` in a
worker child (only children have Django), batched by :class:`Recorder`. Each
record is a dict with exactly these keys:

``msgid`` (str), ``queue`` (str), ``job`` (dotted name or ``"?"``), ``args``
(list), ``kwargs`` (dict), ``status`` (a :class:`~django_eventmq.protocol.status.JobStatus`, one of
:data:`~django_eventmq.protocol.status.RECORD_STATUSES`),
``value`` (the JSON-able return value when succeeded, else None), ``error``
(``{"type", "message", "traceback"}``, plus ``"path"``, the exception's
``module.qualname``, when a job raised it; or None), ``attempt`` (int, from 1),
``jobmanager`` (name of the job manager), ``pid`` (worker pid or None),
``started`` / ``finished`` (unix times or None); and ``progress`` (the JSON-able
value of the job's last partial) only in the ``running`` records a partial
adds (:mod:`.progress`; coalesced, so at most ``PARTIAL_RATE`` a second per job);
and ``options`` (the header fields it was sent with: ``timeout``, ``priority``...)
in the records of a job given up, which its dead letter keeps for a retry.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from typing import Any

from django_eventmq.errors import InvalidJob
from django_eventmq.jobmanager.pipe import encode_records
from django_eventmq.protocol import encode_json, parse_job
from django_eventmq.protocol.status import EXPIRED_ERROR, JobStatus
from django_eventmq.runtime.retry_policy import RETRY_IN

#: A records batch goes out when it is this old (seconds) or this long.
RECORD_EVERY = 0.2
RECORD_BATCH = 200
#: Records kept while no child can take them; older ones are dropped beyond this.
RECORD_BACKLOG = 20_000


def error_info(exc_type: str, message: str, traceback: str = "") -> dict[str, str]:
    return {"type": exc_type, "message": message, "traceback": traceback}


def error_payload(exc_type: str, message: str, traceback: str = "") -> str:
    """The reply payload for a job that failed.

    The reference job manager answers a failed job with ``{"value": str(exc)}``,
    which its clients cannot tell from a result. We keep that ``value`` so a
    reference client sees what it always saw, and add ``error`` with the type,
    message and traceback so our client can raise :class:`JobError`.
    """
    return encode_json({"value": message, "error": error_info(exc_type, message, traceback)})


def timeout_payload(seconds: int) -> str:
    """The reply for a job killed at its ``timeout:N``; ``value`` as the reference says it."""
    message = f"job ran longer than its timeout of {seconds}s; its worker process was stopped"
    return encode_json({"value": "TimeoutError", "error": error_info("TimeoutError", message)})


def cancelled_payload() -> str:
    return encode_json(
        {"value": "Cancelled", "error": error_info("Cancelled", "the job was cancelled")}
    )


def expired_error() -> dict[str, str]:
    """The error of a job not started before its ``expires`` time (clients raise JobExpired)."""
    return error_info(EXPIRED_ERROR, "not started before its expiry; it never ran")


def expired_payload() -> str:
    """The reply for a job held past its ``expires`` time and not started.

    Reported in a DONE ``cancelled`` (see ``protocol.status.expired_reply``).
    """
    return encode_json({"value": None, "error": expired_error()})


def retry_payload(attempt: int, error: dict[str, str], delay: float | None = None) -> str:
    """DONE ``retry`` payload: which attempt failed, and how.

    ``value`` is there as in a failed job's reply: the router forwards this
    payload as the final reply once it stops retrying. ``delay``: seconds the
    router holds the job before the next attempt (``retry_in``, the job's retry
    policy; None: the router's own back-off).
    """
    fields: dict[str, Any] = {"value": error["message"], "attempt": attempt, "error": error}
    if delay is not None:
        fields[RETRY_IN] = delay
    return encode_json(fields)


def parse_failure(payload: str) -> tuple[str, dict[str, str]]:
    """``(job name, error info)`` from a child's ``failed``/``refused`` payload."""
    try:
        info: dict[str, Any] = json.loads(payload)
    except ValueError:
        info = {"message": payload}
    error = error_info(
        str(info.get("type", "Error")), str(info.get("message", "")), str(info.get("traceback", ""))
    )
    if info.get("path"):
        error["path"] = str(info["path"])  # records keep the importable class too
    return str(info.get("job", "?")), error


class Recorder:
    """Collects outcome records and hands them to worker children in batches."""

    def __init__(self, jobmanager: str) -> None:
        self.jobmanager = jobmanager
        self.records: list[dict[str, Any]] = []
        #: Encoded batches waiting for a child (frame data).
        self.batches: deque[bytes] = deque()
        self._first_at = 0.0

    def add(
        self,
        *,
        msgid: str,
        queue: str,
        body_text: str,
        status: JobStatus,
        attempt: int,
        pid: int | None,
        started: float | None,
        finished: float | None = None,
        value: Any = None,
        error: dict[str, str] | None = None,
        now: float,
        progress: Any = None,
        options: dict[str, Any] | None = None,
        poisoned: bool = False,
    ) -> None:
        """``poisoned``: a job the router set aside (its journal keeps it, not a dead letter)."""
        try:
            body = parse_job(body_text)
            name, args, kwargs = body.name, list(body.args), dict(body.kwargs)
        except InvalidJob:
            name, args, kwargs = "?", [], {}
        if not self.records:
            self._first_at = now
        self.records.append(
            {
                "msgid": msgid,
                "queue": queue,
                "job": name,
                "args": args,
                "kwargs": kwargs,
                "status": status,
                "value": value,
                "error": error,
                "attempt": attempt,
                "jobmanager": self.jobmanager,
                "pid": pid,
                "started": started,
                "finished": finished,
            }
        )
        if progress is not None:
            self.records[-1]["progress"] = progress
        if options:
            self.records[-1]["options"] = options
        if poisoned:
            self.records[-1]["poisoned"] = True
        if len(self.records) > RECORD_BACKLOG:
            del self.records[: len(self.records) - RECORD_BACKLOG]

    @property
    def waiting(self) -> bool:
        return bool(self.records or self.batches)

    def due(self, now: float) -> bool:
        records = self.records
        return bool(records) and (
            len(records) >= RECORD_BATCH or now - self._first_at >= RECORD_EVERY
        )

    def take(self, now: float) -> list[dict[str, Any]]:
        """The next batch (oldest records first)."""
        batch = self.records[:RECORD_BATCH]
        del self.records[:RECORD_BATCH]
        self._first_at = now
        return batch

    def flush(self, send: Callable[[bytes], bool], now: float, *, force: bool = False) -> None:
        """Batch due records and pass batches to ``send(data)`` until it refuses."""
        while self.records and (force or self.due(now)):
            self.batches.append(encode_records(self.take(now)))
        batches = self.batches
        while batches and send(batches[0]):
            batches.popleft()

    def resend(self, batches: list[bytes]) -> None:
        """Batches a stopped child never handled go out again first."""
        self.batches.extendleft(reversed(batches))

    def clear(self) -> None:
        self.records.clear()
        self.batches.clear()
