"""The transactional outbox: jobs written in the sender's transaction (see :mod:`.models`).

``.delay_on_commit()`` of a job with ``outbox`` writes its row in the caller's
transaction, so the row exists exactly when the caller's writes do. The
sending process sends the job after the commit and deletes the row once the
router acknowledged it; a row still here after ``OUTBOX_RELAY_AFTER`` seconds
(its process died, the router was down) is sent by a scheduler, the relay
(:mod:`django_eventmq.outbox`). A row holds the REQUEST as it is sent.
"""

from __future__ import annotations

from django.db import models


class OutboxJob(models.Model):
    """One job committed with its transaction and not acknowledged by a router yet."""

    msgid = models.CharField(max_length=100, primary_key=True)
    queue = models.CharField(max_length=100)
    headers = models.TextField(blank=True, help_text="The eMQP headers frame as sent.")
    body = models.TextField(help_text="The job body (JSON) as sent.")
    created = models.DateTimeField(db_index=True)

    class Meta:
        verbose_name = "outbox job"
        ordering = ("created",)

    def __str__(self) -> str:
        return f"{self.msgid} ({self.queue})"
