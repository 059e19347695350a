"""A job inside a job manager: its record (:class:`ManagedJob`), from acceptance to outcome.

One record per job, built once from the REQUEST's fields (:meth:`.manager.JobManager._accept`)
and carried through the job manager's parts: the lifecycle, the pool, the
outcomes (:mod:`.endings`) and the features plugged into them.
"""

from __future__ import annotations

from dataclasses import dataclass

from django_eventmq.jobmanager.child_handles import Child
from django_eventmq.jobmanager.stages import NO_STAGES, Plan
from django_eventmq.protocol.headers import EMPTY_HEADERS, Headers
from django_eventmq.runtime import job_context

#: Why a job was asked to be skipped in its child (:attr:`ManagedJob.skip`).
SKIP_CANCEL = "cancel"
SKIP_NACK = "nack"
#: Taken back from a child a reload replaces: it runs in a new one (the new code).
SKIP_MOVE = "move"
#: An async job past its ``timeout``: its task was cancelled (the others on the loop go on).
SKIP_TIMEOUT = "timeout"


@dataclass(slots=True, eq=False)
class ManagedJob:
    """A job this job manager accepted and has not finished."""

    msgid: str
    queue: str
    body_text: str
    reply_requested: bool
    timeout: int = 0
    retry_count: int = 0
    attempt: int = 1
    #: Outcome records are kept for it (reply requested, or RECORD_ALL_RESULTS).
    record: bool = False
    child: Child | None = None
    started: float | None = None  # unix time, for records
    pid: int | None = None
    #: Its child was asked to skip it: SKIP_CANCEL or SKIP_NACK.
    skip: str = ""
    #: Monotonic time it became its child's running job, as far as we saw (0: not seen).
    began: float = 0.0
    #: The router group it came from (index of the job manager's link): its
    #: outcome goes back there.
    link: int = 0
    #: Seconds after which its child raises SoftTimeLimitExceeded inside it
    #: (the ``soft-timeout`` header; None: no soft limit). ``timeout`` still kills.
    soft_timeout: int | None = None
    #: Unix time after which it is not started (the ``expires`` header; None: never).
    expires: float | None = None
    #: Its trace context for the child's run span (runtime/tracing.py; b"": untraced).
    trace: bytes = b""
    #: The headers it was sent with: a dead letter keeps their options (timeout, priority...).
    headers: Headers | None = None
    #: An ``async def`` job: it runs beside others on its child's event loop (:mod:`.tasks`);
    #: None until the children said which jobs are (:meth:`.lifecycle.Lifecycle.kind`).
    concurrent: bool | None = None
    #: Monotonic time by which its cancelled task must have ended (0: not cancelled).
    cancel_by: float = 0.0
    #: The features that act on it, per point of its path (:mod:`.stages`), given
    #: as it is accepted (:meth:`.stages.Stages.fit`); NO_STAGES: none.
    plan: Plan = NO_STAGES


def context_line(job: ManagedJob) -> bytes:
    """What the child is told about ``job`` for ``current_job()`` (runtime/job_context.py)."""
    headers = job.headers
    text = "" if headers is None or headers is EMPTY_HEADERS else _header_text(headers)
    return job_context.encode_line(job.msgid, job.queue, job.attempt, text)


#: Headers come parsed, one object per distinct header frame (parse_headers caches
#: them): their text is made once for all the jobs that share them, found by the
#: object's id (hashing a Headers costs more than making its text); the entry
#: holds the object, so its id is not reused while it is there.
_header_texts: dict[int, tuple[Headers, str]] = {}


def _header_text(headers: Headers) -> str:
    found = _header_texts.get(id(headers))
    if found is not None and found[0] is headers:
        return found[1]
    text = headers.encode()
    if len(_header_texts) >= 256:
        _header_texts.clear()
    _header_texts[id(headers)] = (headers, text)
    return text
