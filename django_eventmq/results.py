"""Reading the job results table, and deleting old rows.

``handle.status`` / ``handle.result`` (:class:`TableReader`), the Tasks
backend and the admin read rows here; the scheduler (``RESULT_EXPIRES``)
and ``emq_purge_results`` delete them in batches. Rows are written by
:mod:`.result_recording` (job managers' workers, and a client's own rows).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from django_eventmq.errors import JobError, JobExpired
from django_eventmq.models.results import JobResult
from django_eventmq.models.workflows import Workflow, WorkflowStatus
from django_eventmq.protocol.status import EXPIRED_ERROR, FINISHED, JobStatus


# -- deleting ------------------------------------------------------------------
def delete_batch(rows: QuerySet[Any], size: int) -> int:
    """Delete up to ``size`` of ``rows`` in one statement; how many went.

    By primary key, a bounded number at a time: one DELETE of a whole big
    table would hold its locks (and grow the WAL) for as long as it runs.
    """
    ids = list(rows.order_by("pk").values_list("pk", flat=True)[:size])
    if ids:
        rows.model.objects.filter(pk__in=ids).delete()  # a workflow's steps go with it
    return len(ids)


def expire_results(before: datetime, batch: int) -> int:
    """Delete up to ``batch`` finished job results and as many finished workflows
    last written before ``before`` (``RESULT_EXPIRES``); how many rows went.

    Queued, running and retrying rows stay, however old, as do running workflows.
    """
    finished = [status.value for status in FINISHED]
    results = JobResult.objects.filter(status__in=finished, updated__lt=before)
    workflows = Workflow.objects.filter(updated__lt=before).exclude(status=WorkflowStatus.RUNNING)
    return delete_batch(results, batch) + delete_batch(workflows, batch)


# -- reading -------------------------------------------------------------------
def get_row(msgid: str) -> JobResult | None:
    return JobResult.objects.filter(msgid=msgid).first()


def error_of(row: JobResult) -> JobError:
    """The :class:`JobError` a finished-but-unsuccessful row stands for
    (:class:`JobExpired` for a job not started before its expiry)."""
    if row.status == JobStatus.EXPIRED:
        return JobExpired(row.exc_type or EXPIRED_ERROR, row.exc_message or "expired")
    exc_type = row.exc_type or ("Cancelled" if row.status == JobStatus.CANCELLED else "Error")
    message = row.exc_message or row.get_status_display()
    return JobError(exc_type, message, row.traceback)


class TableReader:
    """``handle.status`` / ``handle.result`` from the results table."""

    def status(self, msgid: str) -> str | None:
        return JobResult.objects.filter(msgid=msgid).values_list("status", flat=True).first()

    def result(self, msgid: str) -> Any:
        from django_eventmq.client.handles import ResultNotReady

        row = get_row(msgid)
        if row is None:
            raise ResultNotReady(f"no result recorded for job {msgid}")
        if row.status == JobStatus.SUCCEEDED:
            return row.value
        if row.status in FINISHED:
            raise error_of(row)
        raise ResultNotReady(f"job {msgid} has not finished (status {row.status})")
