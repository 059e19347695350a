"""Job statuses: the one vocabulary of the wire, the job manager, the results table and the stats.

Two enums, because a job is described at two moments, and the words of both
are fixed by what is already out there:

- :class:`DoneStatus`: how a job ended, as a job manager of ours says it in
  a DONE (``DONE JOB_MSGID, STATUS, PAYLOAD``; routers already deployed read
  these words), as a worker child writes it on its pipe, and as
  :class:`~django_eventmq.runtime.stats.Stats` counts it
  (``emq_jobs_finished_total{status}``).
- :class:`JobStatus`: where a job is in its life, as the results table
  stores it (existing rows and migration 0002 hold these words) and as a job
  manager's outcome records say it.

They are genuinely different sets, not two spellings of one: the wire says
``ok``/``timeout``/``retry`` where a row says ``succeeded``/``timed_out``/
``retrying``; ``refused`` and ``died`` exist only on the wire (a row records
a refused job as failed, and a died one as failed or retrying, depending on
whether the job is handed out again), and ``queued``/``running`` only in rows
(no DONE reports a job that has not ended). :data:`RESULT_OF` maps one onto
the other. Both are ``StrEnum`` s: a member *is* its string (equal to it,
hashed like it, written as it on the wire, in JSON and in logs), so code
that compares with the plain words keeps working.

Sans-IO like the rest of :mod:`django_eventmq.protocol`: no Django here; the
model derives its ``choices`` from :class:`JobStatus`.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Final


class DoneStatus(StrEnum):
    """How a job ended, as a job manager reports it (the STATUS frame of a DONE)."""

    OK = "ok"
    FAILED = "failed"
    TIMEOUT = "timeout"
    #: The job manager would not run it (not registered, body too large, ...).
    REFUSED = "refused"
    CANCELLED = "cancelled"
    #: Its worker process died running it.
    DIED = "died"
    #: Failed, and should be retried by the router (its retry-count allows it).
    RETRY = "retry"
    #: A stats bucket only, never sent: a reference job manager finishes a job
    #: with READY/REPLY, which does not say how it went.
    UNKNOWN = "unknown"


class JobStatus(StrEnum):
    """Where a job is in its life (the ``status`` column of the results table)."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    RETRYING = "retrying"
    CANCELLED = "cancelled"

    @property
    def label(self) -> str:
        """The human form (the admin's, and the model choices' second element)."""
        return self.value.replace("_", " ")


#: The statuses a DONE may carry (a router of ours refuses a DONE with any other).
DONE_STATUSES: Final = frozenset(DoneStatus) - {DoneStatus.UNKNOWN}
#: What a worker child reports for a job on its pipe (the job manager adds the rest).
CHILD_STATUSES: Final = frozenset(
    {DoneStatus.OK, DoneStatus.FAILED, DoneStatus.REFUSED, DoneStatus.CANCELLED}
)
#: Outcomes of jobs that did not run: their time is not a run time.
NOT_RUN: Final = frozenset({DoneStatus.REFUSED, DoneStatus.CANCELLED})
#: Outcomes that also count as failures (``emq_jobs_failed_total``).
FAILED_OUTCOMES: Final = frozenset(
    {DoneStatus.FAILED, DoneStatus.TIMEOUT, DoneStatus.REFUSED, DoneStatus.DIED}
)

#: Statuses a job manager's outcome record may carry (``queued`` is a client's row).
RECORD_STATUSES: Final = frozenset(JobStatus) - {JobStatus.QUEUED}
#: Statuses after which nothing more happens to the job.
FINISHED: Final = frozenset(
    {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.TIMED_OUT, JobStatus.CANCELLED}
)
#: Finished without a result: what a failure count or list of a results table counts.
FAILED_RESULTS: Final = frozenset({JobStatus.FAILED, JobStatus.TIMED_OUT})

#: The row status a DONE status stands for (a ``died`` job that is handed out
#: again is ``retrying`` instead: only the job manager knows which).
RESULT_OF: Final[Mapping[DoneStatus, JobStatus]] = MappingProxyType(
    {
        DoneStatus.OK: JobStatus.SUCCEEDED,
        DoneStatus.FAILED: JobStatus.FAILED,
        DoneStatus.TIMEOUT: JobStatus.TIMED_OUT,
        DoneStatus.REFUSED: JobStatus.FAILED,
        DoneStatus.CANCELLED: JobStatus.CANCELLED,
        DoneStatus.DIED: JobStatus.FAILED,
        DoneStatus.RETRY: JobStatus.RETRYING,
    }
)
