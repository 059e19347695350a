"""The digests app: what the Spark pipeline's send_digest jobs recorded."""

from __future__ import annotations

from django.apps import AppConfig


class DigestsConfig(AppConfig):
    name = "example_project.digests"
    label = "digests"
    verbose_name = "Digests (started from Spark)"
    default_auto_field = "django.db.models.BigAutoField"
