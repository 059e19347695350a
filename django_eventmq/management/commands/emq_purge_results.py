"""``manage.py emq_purge_results``: delete old job results, in chunks."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from django_eventmq.management.progress import command_progress
from django_eventmq.models.results import JobResult
from django_eventmq.models.workflows import Workflow, WorkflowStatus
from django_eventmq.results import delete_batch
from django_eventmq.runtime.config import get_settings

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([dhms]?)\s*$")
_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1, "": 86400}


def parse_age(text: str) -> timedelta:
    """``7d``, ``12h``, ``30m``, ``45s`` (a bare number is days) as a timedelta."""
    match = _AGE.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not an age such as 7d, 12h or 30m")
    return timedelta(seconds=float(match.group(1)) * _UNIT_SECONDS[match.group(2)])


class Command(BaseCommand):
    help = (
        "Delete job results last written longer ago than --older-than (default: the "
        "RESULTS_RETENTION_DAYS setting), a chunk at a time so the table stays usable, and "
        "finished workflows (chain, group, chord) as old. "
        "On a terminal a progress bar shows how far it is; elsewhere a line per chunk."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than",
            metavar="AGE",
            help="e.g. 7d, 12h, 30m (default: RESULTS_RETENTION_DAYS days)",
        )
        parser.add_argument(
            "--chunk-size",
            type=int,
            default=5000,
            help="rows deleted per statement (default: 5000)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            age = (
                parse_age(options["older_than"])
                if options["older_than"]
                else timedelta(days=get_settings().results_retention_days)
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        chunk = options["chunk_size"]
        if chunk < 1:
            raise CommandError("--chunk-size must be at least 1")
        cutoff = timezone.now() - age
        old = JobResult.objects.filter(updated__lt=cutoff)
        verbosity = options["verbosity"]
        total = 0
        # The count is a snapshot: rows aging past the cutoff meanwhile are deleted too.
        expected = old.count()
        with command_progress(self, expected, "job results deleted", verbosity=verbosity) as bar:
            while True:
                deleted = delete_batch(old, chunk)
                if not deleted:
                    break
                total += deleted
                bar.total = max(expected, total)
                bar.update(total)
                if verbosity >= 1 and not bar.tty:
                    self.stdout.write(f"deleted {total} job results so far")
        self.stdout.write(
            f"deleted {total} job results last updated before {cutoff:%Y-%m-%d %H:%M:%S %Z}"
        )
        # Finished workflows go with the results their members left (a running one stays).
        done = Workflow.objects.filter(updated__lt=cutoff).exclude(status=WorkflowStatus.RUNNING)
        gone = done.count()
        done.delete()  # their steps go with them (on_delete=CASCADE)
        if gone:
            self.stdout.write(
                f"deleted {gone} finished workflows last updated before the same time"
            )
