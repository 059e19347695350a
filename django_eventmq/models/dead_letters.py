"""Dead letters: jobs that will not run again by themselves (see :mod:`.models`).

A job lands here when its last attempt failed or timed out (written next to
its ``failed``/``timed_out`` results row by :func:`django_eventmq.result_recording.record_results`).
Jobs the router set aside as poisoned live in the router's journal, not here:
the admin page (:mod:`django_eventmq.admin.dead_letters`) lists them over the
router's admin socket. A row keeps what a retry needs: queue, job, args,
kwargs and the job's options (``headers``: timeout, retries, priority...).
"""

from __future__ import annotations

from django.db import models


class DeadLetterReason(models.TextChoices):
    """Why a job is a dead letter."""

    FAILED = "failed", "failed"
    TIMED_OUT = "timed_out", "timed out"
    POISONED = "poisoned", "poisoned"


class DeadLetter(models.Model):
    """One job that exhausted its retries: what it was, how it died, whether it was retried."""

    msgid = models.CharField(max_length=100, unique=True)
    reason = models.CharField(
        max_length=16, choices=DeadLetterReason.choices, default="failed", db_index=True
    )
    queue = models.CharField(max_length=100, blank=True, db_index=True)
    job = models.CharField(
        max_length=255, blank=True, db_index=True, help_text="Dotted name, e.g. 'shop.jobs.send'."
    )
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    headers = models.JSONField(
        default=dict,
        blank=True,
        help_text="Options as sent (timeout, retries, priority), for a retry.",
    )
    exc_type = models.CharField("exception class", max_length=255, blank=True)
    exc_message = models.TextField("exception message", blank=True)
    traceback = models.TextField(blank=True)
    attempts = models.IntegerField(default=0, help_text="Runs before it was given up.")
    jobmanager = models.CharField("job manager", max_length=255, blank=True)
    #: When it died (the admin's date filter).
    created = models.DateTimeField(db_index=True)
    retried = models.DateTimeField("last retried", null=True, blank=True)
    retries = models.IntegerField(default=0, help_text="Times it was sent again from here.")
    retried_msgid = models.CharField(
        "retried as", max_length=100, blank=True, help_text="Msgid of the job its last retry sent."
    )
    retry_of = models.CharField(
        max_length=100,
        blank=True,
        db_index=True,
        help_text="Msgid of the dead letter this job was a retry of.",
    )

    class Meta:
        verbose_name = "dead letter"
        ordering = ("-created",)

    def __str__(self) -> str:
        return f"{self.job or '?'} {self.msgid} ({self.reason})"
