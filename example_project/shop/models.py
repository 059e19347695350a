"""What the example jobs leave behind, so you can see that they ran."""

from __future__ import annotations

from django.db import models


class SentEmail(models.Model):
    """An e-mail the ``send_welcome`` job "sent" (recorded, not delivered)."""

    to = models.EmailField()
    subject = models.CharField(max_length=200)
    sent_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-sent_at", "-id"]

    def __str__(self) -> str:
        return f"{self.subject} -> {self.to}"


class Report(models.Model):
    """A report the ``build_report`` job built."""

    name = models.CharField(max_length=200)
    rows = models.PositiveIntegerField(default=0)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.rows} rows)"
