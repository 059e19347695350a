"""``manage.py emq_status``: running routers' queues, job managers and schedulers."""

from __future__ import annotations

import contextlib
import io
from typing import Any, TextIO, cast

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_eventmq.cli import options as cli
from django_eventmq.cli import status_command
from django_eventmq.management.process_command import command_errors
from django_eventmq.runtime import admin_client
from django_eventmq.runtime.config import get_settings


class Command(BaseCommand):
    help = (
        "Show running routers' queues (waiting, in flight, waiting since, throughput), "
        "job managers (queues, weights, free slots, last heartbeat) and schedulers, read "
        "from their admin addresses; with several ('a,b;c': ',' between the members of a "
        "router group, ';' between groups), which router leads each group and per-group "
        "depths. --watch redraws every --interval seconds until Ctrl-C."
    )
    requires_migrations_checks = False
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        cli.add_status_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        with command_errors():
            settings = get_settings()  # a bad STATUS_ADMIN_ADDRS stops here, named
        # The raw stream, not Django's wrapper: frames are written whole and
        # --watch asks it isatty().
        out = cast(TextIO, self.stdout._out)  # typed as a callable in django-stubs
        err = io.StringIO()
        code = status_command.run_options(
            options, settings.admin_addr, out, settings=settings, err=err
        )
        if options.get("stop"):
            if code:
                message = err.getvalue().strip().removeprefix("emq_status: ")
                raise CommandError(message, returncode=code)
            return
        if not code and not options.get("json") and not options.get("watch"):
            self._dead_letters(out)
        if code == 2:  # a bad --admin list given to call_command (the parser checks the CLI's)
            raise CommandError(err.getvalue().strip().removeprefix("emq_status: "))
        if code:
            routers = status_command.admin_targets(
                options.get("admin"), settings.admin_addr, settings
            )
            raise CommandError(
                "a shard has no leader that answered"
                if admin_client.is_admin_list(routers)
                else "the router did not answer",
                returncode=code,
            )

    def _dead_letters(self, out: TextIO) -> None:
        """The results table's dead letters, under the routers' figures (their poisoned
        jobs are in those); nothing when this database has no such table."""
        from django.db import DatabaseError

        from django_eventmq.dead_letters import count_line

        # Not migrated here: the routers' part is what counts.
        with contextlib.suppress(DatabaseError):
            out.write(count_line() + "\n")
