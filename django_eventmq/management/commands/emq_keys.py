"""``manage.py emq_keys``: generate CURVE key pairs for the router and its peers."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_eventmq.management.process_command import command_errors
from django_eventmq.runtime import security


class Command(BaseCommand):
    help = (
        "Generate CURVE key pairs (ZeroMQ CurveZMQ). With --dir, writes NAME.key (public) "
        "and NAME.key_secret (secret, mode 600) per name; without, prints Z85 keys for "
        "EMQ_* environment variables. Keep secret keys out of the repository."
    )
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        security.add_keys_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        with command_errors():
            lines = security.make_keys(options["names"], options["dir"], force=options["force"])
        for line in lines:
            self.stdout.write(line)
