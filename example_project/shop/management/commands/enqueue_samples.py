"""``manage.py enqueue_samples --count N``: queue sample jobs for the demo."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_eventmq.management.progress import command_progress

from ...jobs import build_report, send_welcome


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


class Command(BaseCommand):
    help = (
        "Queue N welcome e-mails (queue 'email') and N reports (queue 'reports') so a "
        "running emq_router + emq_jobmanager have something to do. A progress bar shows "
        "how far it is when stdout is a terminal."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--count",
            "-n",
            type=_positive,
            default=10,
            metavar="N",
            help="how many jobs of each kind to queue (default: 10)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        count: int = options["count"]
        verbosity: int = options["verbosity"]
        with command_progress(self, 2 * count, "jobs queued", verbosity=verbosity) as bar:
            for i in range(count):
                send_welcome.delay(f"customer{i}@example.com")
                build_report.delay(f"sample-report-{i}")
                bar.advance(2)
        self.stdout.write(
            self.style.SUCCESS(f"Queued {count} welcome e-mails and {count} reports.")
        )
