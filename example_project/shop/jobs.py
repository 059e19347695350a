"""The shop's background jobs; django_eventmq finds this module by its name (jobs.py).

Call ``send_welcome.delay("ann@example.com")`` to queue a job; a job
manager serving the queue runs it. Calling ``send_welcome(...)`` runs it here.
"""

from __future__ import annotations

import logging

from django.contrib.auth import get_user_model

from django_eventmq import job

from .models import Report, SentEmail

logger = logging.getLogger(__name__)

WELCOME_SUBJECT = "Welcome to the shop!"


@job(queue="email")
def send_welcome(email: str) -> int:
    """Record a welcome e-mail to ``email``; returns the SentEmail id."""
    sent = SentEmail.objects.create(to=email, subject=WELCOME_SUBJECT)
    logger.info("welcome e-mail recorded for %s (id %s)", email, sent.pk)
    return sent.pk


@job(queue="reports")
def build_report(name: str) -> int:
    """Build a report (here: count the users and e-mails); returns the Report id."""
    rows = get_user_model().objects.count() + SentEmail.objects.count()
    report = Report.objects.create(name=name, rows=rows)
    logger.info("report %r built with %d rows (id %s)", name, rows, report.pk)
    return report.pk
