"""The job results table (imported by :mod:`django_eventmq.models`).

One :class:`JobResult` row per job msgid, written in batches by job-manager
workers (:func:`django_eventmq.result_recording.record_results`) for ``reply_requested``
jobs, or for every job with ``RECORD_ALL_RESULTS``. The Tasks backend also
writes the ``queued`` row when it enqueues.
"""

from __future__ import annotations

from django.db import models

# JobStatus is imported from here by the admin and the Tasks backend too.
from django_eventmq.protocol.status import FINISHED, RESULT_STATUSES
from django_eventmq.protocol.status import JobStatus as JobStatus

#: The ``status`` column's choices, from the one status vocabulary
#: (:mod:`django_eventmq.protocol.status`); the stored words and labels are
#: those of migration 0002.
STATUS_CHOICES = [(status.value, status.label) for status in RESULT_STATUSES]


class JobResult(models.Model):
    """What became of one job: status, return value or error, attempts, timing."""

    msgid = models.CharField(max_length=100, unique=True)
    queue = models.CharField(max_length=100, blank=True, db_index=True)
    job = models.CharField(
        max_length=255, blank=True, db_index=True, help_text="Dotted name, e.g. 'shop.jobs.send'."
    )
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    status = models.CharField(
        max_length=16, choices=STATUS_CHOICES, default=JobStatus.QUEUED.value, db_index=True
    )
    value = models.JSONField(null=True, blank=True, help_text="The return value (JSON).")
    progress = models.JSONField(
        null=True,
        blank=True,
        help_text="The last progress the job reported (progress() or a yielded partial).",
    )
    exc_type = models.CharField("exception class", max_length=255, blank=True)
    exc_message = models.TextField("exception message", blank=True)
    traceback = models.TextField(blank=True)
    attempts = models.IntegerField(default=0, help_text="Runs so far (retries included).")
    jobmanager = models.CharField("job manager", max_length=255, blank=True)
    pid = models.IntegerField(null=True, blank=True)
    workers = models.JSONField(
        default=list,
        blank=True,
        help_text="Worker process of each run (job manager:pid), redeliveries included.",
    )
    enqueued = models.DateTimeField(null=True, blank=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    duration = models.FloatField("duration (s)", null=True, blank=True)
    #: When the row was first written (the admin's date filter).
    created = models.DateTimeField(db_index=True)
    #: When the row was last written (the retention purge reads it).
    updated = models.DateTimeField(db_index=True)

    class Meta:
        verbose_name = "job result"
        ordering = ("-created",)

    def __str__(self) -> str:
        return f"{self.job or '?'} {self.msgid} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED
