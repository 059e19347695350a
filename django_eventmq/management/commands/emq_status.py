"""``manage.py emq_status``: a running router's queues, job managers and schedulers."""

from __future__ import annotations

from typing import Any, TextIO, cast

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_eventmq.cli import options as cli
from django_eventmq.cli import status
from django_eventmq.errors import EventMQError
from django_eventmq.runtime.config import get_settings


class Command(BaseCommand):
    help = (
        "Show a running router's queues (waiting, in flight, waiting since, throughput), "
        "job managers (queues, weights, free slots, last heartbeat) and schedulers, read "
        "from its admin address. --watch redraws every --interval seconds until Ctrl-C."
    )
    requires_migrations_checks = False
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        cli.add_status_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            admin = options.get("admin") or get_settings().admin_addr
        except EventMQError as exc:
            raise CommandError(str(exc)) from None
        # The raw stream, not Django's wrapper: frames are written whole and
        # --watch asks it isatty().
        out = cast(TextIO, self.stdout._out)  # typed as a callable in django-stubs
        code = status.run_options(options, admin, out)
        if code:
            raise CommandError("the router did not answer", returncode=code)
