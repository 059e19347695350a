"""One row per digest e-mail the ``send_digest`` job "sent" (recorded, not delivered)."""

from __future__ import annotations

from django.db import models


class DigestSent(models.Model):
    """A user's daily digest, recorded once per job msgid.

    ``msgid`` is the job's id (``<run id>:<user id>,"<day>"``, derived from
    the export by the Spark pipeline), unique: a job that is delivered again
    does not send again, it only counts the extra ``deliveries``.
    """

    msgid = models.CharField(max_length=200, unique=True)
    run_id = models.CharField(max_length=100, db_index=True)
    user_id = models.BigIntegerField()
    email = models.EmailField()
    day = models.DateField()
    events = models.PositiveIntegerField()
    purchases = models.PositiveIntegerField()
    revenue = models.DecimalField(max_digits=12, decimal_places=2)
    #: How many times the job ran for this msgid; more than 1 means a duplicate delivery.
    deliveries = models.PositiveIntegerField(default=1)
    sent_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-sent_at", "-id"]
        indexes = [models.Index(fields=["user_id", "day"])]
        verbose_name = "digest sent"
        verbose_name_plural = "digests sent"

    def __str__(self) -> str:
        return f"digest of {self.day} -> {self.email}"
