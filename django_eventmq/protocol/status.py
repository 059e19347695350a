"""Job statuses: the one vocabulary of the wire, the job manager, the results table and the stats.

One enum, :class:`JobStatus`, with two subsets, because a job is described at
two moments and the words of both are fixed by what is already out there:

- :data:`DONE_STATUSES`: how a job ended, as a job manager of ours says it in
  a DONE (``DONE JOB_MSGID, STATUS, PAYLOAD``; routers already deployed read
  these words), as a worker child writes it on its pipe, and as
  :class:`~django_eventmq.runtime.stats.Stats` counts it
  (``emq_jobs_finished_total{status}``).
- :data:`RESULT_STATUSES`: where a job is in its life, as the results table
  stores it (existing rows and migration 0002 hold these words) and as a job
  manager's outcome records say it.

The wire says ``ok``/``timeout``/``retry`` where a row says ``succeeded``/
``timed_out``/``retrying``; ``refused`` and ``died`` exist only on the wire (a
row records a refused job as failed, and a died one as failed or retrying,
depending on whether the job is handed out again), and ``queued``/``running``
only in rows (no DONE reports a job that has not ended); ``failed`` and
``cancelled`` are in both; ``expired`` (not started before its ``expires``
time) is a row's word only, a DONE says it as ``cancelled`` with an
``Expired`` error. :data:`RESULT_OF` maps one subset onto the other.
:class:`JobStatus` is a ``StrEnum``: a member *is* its string (equal to it,
hashed like it, written as it on the wire, in JSON and in logs), so code that
compares with the plain words keeps working.

Sans-IO like the rest of :mod:`django_eventmq.protocol`: no Django here; the
model derives its ``choices`` from :data:`RESULT_STATUSES`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Final


class JobStatus(StrEnum):
    """Every word for a job's status: where it is (a results row), how it ended (a DONE)."""

    # Where a job is in its life: the results table's words (RESULT_STATUSES).
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    RETRYING = "retrying"
    CANCELLED = "cancelled"
    #: Not started before its ``expires`` time, never run: a row's word only; a DONE
    #: (and the finished-jobs metric) says ``cancelled`` with an ``Expired`` error
    #: (:func:`expired_reply`); routers count these apart (MONITOR ``jobs_expired``).
    EXPIRED = "expired"
    # How a job ended, as a DONE says it (DONE_STATUSES: these, FAILED and CANCELLED).
    OK = "ok"
    TIMEOUT = "timeout"
    #: The job manager would not run it (not registered, body too large, ...).
    REFUSED = "refused"
    #: Its worker process died running it.
    DIED = "died"
    #: Failed, and should be retried by the router (its retry-count allows it).
    RETRY = "retry"
    #: A stats bucket only, never sent: a reference job manager finishes a job
    #: with READY/REPLY, which does not say how it went.
    UNKNOWN = "unknown"

    @property
    def label(self) -> str:
        """The human form (the admin's, and the model choices' second element)."""
        return self.value.replace("_", " ")


#: The results table's words, in the order of its choices (migration 0002).
RESULT_STATUSES: Final = (
    JobStatus.QUEUED,
    JobStatus.RUNNING,
    JobStatus.SUCCEEDED,
    JobStatus.FAILED,
    JobStatus.TIMED_OUT,
    JobStatus.RETRYING,
    JobStatus.CANCELLED,
    JobStatus.EXPIRED,
)

#: The statuses a DONE may carry (a router of ours refuses a DONE with any other).
DONE_STATUSES: Final = frozenset(
    {
        JobStatus.OK,
        JobStatus.FAILED,
        JobStatus.TIMEOUT,
        JobStatus.REFUSED,
        JobStatus.CANCELLED,
        JobStatus.DIED,
        JobStatus.RETRY,
    }
)
#: What a worker child reports for a job on its pipe (the job manager adds the rest).
CHILD_STATUSES: Final = frozenset(
    {JobStatus.OK, JobStatus.FAILED, JobStatus.REFUSED, JobStatus.CANCELLED}
)
#: Outcomes of jobs that did not run: their time is not a run time.
NOT_RUN: Final = frozenset({JobStatus.REFUSED, JobStatus.CANCELLED})
#: Outcomes that also count as failures (``emq_jobs_failed_total``).
FAILED_OUTCOMES: Final = frozenset(
    {JobStatus.FAILED, JobStatus.TIMEOUT, JobStatus.REFUSED, JobStatus.DIED}
)

#: Statuses a job manager's outcome record may carry (``queued`` is a client's row).
RECORD_STATUSES: Final = frozenset(RESULT_STATUSES) - {JobStatus.QUEUED}
#: Statuses after which nothing more happens to the job.
FINISHED: Final = frozenset(
    {
        JobStatus.SUCCEEDED,
        JobStatus.FAILED,
        JobStatus.TIMED_OUT,
        JobStatus.CANCELLED,
        JobStatus.EXPIRED,
    }
)
#: Finished without a result: what a failure count or list of a results table counts.
FAILED_RESULTS: Final = frozenset({JobStatus.FAILED, JobStatus.TIMED_OUT})

#: The row status a DONE status stands for (a ``died`` job that is handed out
#: again is ``retrying`` instead: only the job manager knows which).
RESULT_OF: Final[Mapping[JobStatus, JobStatus]] = MappingProxyType(
    {
        JobStatus.OK: JobStatus.SUCCEEDED,
        JobStatus.FAILED: JobStatus.FAILED,
        JobStatus.TIMEOUT: JobStatus.TIMED_OUT,
        JobStatus.REFUSED: JobStatus.FAILED,
        JobStatus.CANCELLED: JobStatus.CANCELLED,
        JobStatus.DIED: JobStatus.FAILED,
        JobStatus.RETRY: JobStatus.RETRYING,
    }
)

#: The error type of the reply to a job not started before its ``expires`` time.
EXPIRED_ERROR: Final = "Expired"


def expired_reply(payload: str) -> bool:
    """True if a reply payload says its job expired before it started.

    A job manager reports such a job in a DONE ``cancelled`` (the DONE words
    are fixed: routers already deployed read them) with this error type, which
    our router counts as expired and an older one forwards as it is.
    """
    if EXPIRED_ERROR not in payload:
        return False
    try:
        reply = json.loads(payload)
    except ValueError:
        return False
    error = reply.get("error") if isinstance(reply, dict) else None
    return isinstance(error, dict) and error.get("type") == EXPIRED_ERROR


#: How the router's REJECT reasons begin for a job it can take later, not now:
#: above its high-water mark (``HWM_POLICY = "reject"``), its journal failing.
FULL_REFUSAL: Final = "router is full"
CANNOT_STORE_REFUSAL: Final = "router cannot store jobs now"


def refused_for_now(reason: str) -> bool:
    """True if a REJECT with ``reason`` passes: the job is to be sent again later
    (same msgid), not given up (an outbox row is kept for its relay)."""
    return reason.startswith((FULL_REFUSAL, CANNOT_STORE_REFUSAL))
