"""``manage.py emq_router``: run the EventMQ router with the project's settings."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser
from django.db import connections

from django_eventmq.cli import options as cli
from django_eventmq.management.process_command import ProcessCommand
from django_eventmq.runtime.service import Service
from django_eventmq.runtime.settings import Settings


class Command(ProcessCommand):
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

    def make_service(self, settings: Settings, options: dict[str, Any]) -> Service:
        connections.close_all()
        from django_eventmq.router.process import router_service

        return router_service(settings, journal_recover=bool(options.get("journal_recover")))

    def metrics_registry(self, metrics: Any, service: Service, settings: Settings) -> Any:
        # The router binds its admin address in run(); ask for it on each scrape.
        return metrics.router_registry(
            lambda: getattr(service, "admin_address", settings.admin_addr)
        )
