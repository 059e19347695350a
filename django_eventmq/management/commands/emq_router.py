"""``manage.py emq_router``: run the EventMQ router with the project's settings."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from django_eventmq import conf
from django_eventmq.cli import options as cli
from django_eventmq.errors import EventMQError


class Command(BaseCommand):
    help = (
        "Run the EventMQ router: binds the frontend (clients, schedulers), backend (job "
        "managers) and admin addresses and routes jobs between them until SIGTERM/SIGINT. "
        "Settings come from settings.EVENTMQ and EMQ_* environment variables; the options "
        "below override them. With a PostgreSQL journal (--journal postgresql://... or a "
        "DATABASES alias such as 'default', or the JOURNAL_URL setting) the router is one "
        "member of a router group (--group): the member holding the group's lease serves, "
        "the others bind only their admin address and take over when it fails."
    )
    # The router does not use the database.
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        cli.add_router_arguments(parser, metrics=True)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            settings = conf.settings_with_options(options)
            # Before anything starts: --metrics without its extra is one line, not a traceback.
            metrics = cli.metrics_module() if options.get("metrics") else None
        except EventMQError as exc:
            raise CommandError(str(exc)) from None
        cli.configure_logging(options["log_level"])
        connections.close_all()
        from django_eventmq.__main__ import router_service

        try:
            router = router_service(settings, journal_recover=bool(options.get("journal_recover")))
        except EventMQError as exc:
            raise CommandError(str(exc)) from None
        server = self._start_metrics(metrics, options.get("metrics"), router, settings.admin_addr)
        try:
            router.run()
        except EventMQError as exc:
            raise CommandError(str(exc)) from None
        finally:
            if server is not None:
                server.close()

    def _start_metrics(
        self, metrics: ModuleType | None, addr: str | None, router: Any, admin_addr: str
    ) -> Any:
        if metrics is None or not addr:
            return None
        # The router binds its admin address in run(); ask for it on each scrape.
        registry = metrics.router_registry(lambda: getattr(router, "admin_address", admin_addr))
        try:
            return metrics.start_metrics_server(addr, registry)
        except EventMQError as exc:
            raise CommandError(str(exc)) from None
