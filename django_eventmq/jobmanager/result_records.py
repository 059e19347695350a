"""Results recording, the job manager's side: the outcome records of a job.

A stage (:mod:`.stages`): a job whose client asked for a reply (or every
job, with ``RECORD_ALL_RESULTS``) has ``ManagedJob.record`` set when it is
accepted, and only such a job's plan holds :class:`ResultRecords`, called at
its start (``running``), at each partial let through (its ``progress``), at
its end and when the router sets it aside; a job that is not recorded does
not call it.
The records go to the :class:`.outcomes.Recorder`, which batches them for a
worker child (only children have Django).
"""

from __future__ import annotations

import json
import time

from django_eventmq.jobmanager.child_handles import Child
from django_eventmq.jobmanager.managed_job import ManagedJob
from django_eventmq.jobmanager.outcomes import Recorder
from django_eventmq.jobmanager.stages import Stage
from django_eventmq.protocol.headers import Headers
from django_eventmq.protocol.status import JobStatus

#: The header options a dead letter keeps, so the admin's retry sends the job as it was sent.
_KEPT_OPTIONS = ("timeout", "retry_count", "priority", "soft_timeout", "guarantee")


class ResultRecords(Stage):
    """Adds the outcome records of the jobs that are recorded."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def wants(self, headers: Headers, record: bool) -> bool:
        return record

    def started(self, job: ManagedJob, child: Child) -> None:
        """``job`` runs in ``child``: its ``running`` record (once per attempt)."""
        if job.started is not None:  # its first partial came first
            return
        job.started = time.time()
        job.pid = child.pid
        self._add(job, JobStatus.RUNNING, None, time.monotonic())

    def progress(self, job: ManagedJob, payload: str) -> None:
        """A partial of ``job`` let through (``{"value": ...}``): a ``running`` record
        with its ``progress``, after the job's first ``running`` record."""
        if job.started is None and job.child is not None:
            self.started(job, job.child)  # its RUNNING record goes first
        try:
            value = json.loads(payload)["value"]
        except (ValueError, KeyError, TypeError):
            value = None
        self._add(job, JobStatus.RUNNING, None, time.monotonic(), progress=value)

    def ended(
        self,
        job: ManagedJob,
        status: JobStatus,
        now: float,
        value: object,
        error: dict[str, str] | None,
    ) -> None:
        """A record of ``job`` with its end (``status``: succeeded, failed, retrying...)."""
        self._ended(job, status, now, value, error)

    def set_aside(self, job: ManagedJob, error: dict[str, str], now: float) -> None:
        """Its worker died, and the router will not run it again: it ends ``failed``."""
        self._ended(job, JobStatus.FAILED, now, None, error, poisoned=True)

    def _ended(
        self,
        job: ManagedJob,
        status: JobStatus,
        now: float,
        value: object,
        error: dict[str, str] | None,
        *,
        poisoned: bool = False,
    ) -> None:
        given_up = status in (JobStatus.FAILED, JobStatus.TIMED_OUT)
        options = _sent_options(job.headers) if given_up and job.headers is not None else None
        finished = time.time()
        self._add(
            job, status, finished, now, value=value, error=error, options=options, poisoned=poisoned
        )

    def _add(
        self,
        job: ManagedJob,
        status: JobStatus,
        finished: float | None,
        now: float,
        *,
        value: object = None,
        error: dict[str, str] | None = None,
        progress: object = None,
        options: dict[str, object] | None = None,
        poisoned: bool = False,
    ) -> None:
        self.recorder.add(
            msgid=job.msgid,
            queue=job.queue,
            body_text=job.body_text,
            status=status,
            attempt=job.attempt,
            pid=job.pid,
            started=job.started if job.started is not None else finished,
            finished=finished,
            value=value,
            error=error,
            now=now,
            progress=progress,
            options=options,
            poisoned=poisoned,
        )


def _sent_options(headers: Headers) -> dict[str, object]:
    """The options of ``headers`` that differ from the defaults (worked out only for a
    job given up, not for every job received)."""
    return {name: value for name in _KEPT_OPTIONS if (value := getattr(headers, name))}
