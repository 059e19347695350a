"""The job the Spark pipeline starts: one digest e-mail per user and day.

The pipeline sends each row of its export as ``send_digest(**row)`` with the
job's msgid as ``job_id``. The job is idempotent on that msgid: a delivery of
the same job again (which the router prevents; see docs/spark.md) is counted,
not sent twice.
"""

from __future__ import annotations

import logging
from decimal import Decimal

from django.db.models import F

from django_eventmq import job

from .models import DigestSent

logger = logging.getLogger(__name__)


@job(queue="email")
def send_digest(
    *,
    user_id: int,
    email: str,
    day: str,
    events: int,
    purchases: int,
    revenue: str,
    run_id: str,
    job_id: str,
) -> int:
    """Record the digest of ``day`` for ``email`` (once per ``job_id``); returns its id."""
    digest, created = DigestSent.objects.get_or_create(
        msgid=job_id,
        defaults={
            "run_id": run_id,
            "user_id": user_id,
            "email": email,
            "day": day,
            "events": events,
            "purchases": purchases,
            "revenue": Decimal(revenue),
        },
    )
    if not created:
        DigestSent.objects.filter(pk=digest.pk).update(deliveries=F("deliveries") + 1)
        logger.warning("digest job %s delivered again: not sent twice", job_id)
    return digest.pk
