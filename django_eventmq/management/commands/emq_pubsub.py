"""``manage.py emq_pubsub``: run the EventMQ publisher with the project's settings."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from django_eventmq.cli import options as cli
from django_eventmq.management.process_command import ProcessCommand
from django_eventmq.runtime.service import Service
from django_eventmq.runtime.settings import Settings


class Command(ProcessCommand):
    help = (
        "Run the EventMQ publisher: binds the incoming address (publish() and other PUBLISH "
        "senders) and the outgoing address (subscribers) and relays each event to the "
        "subscribers whose prefix matches its topic, until SIGTERM/SIGINT. A subscriber that "
        "falls behind loses new events instead of slowing the others. Settings come from "
        "settings.EVENTMQ and EMQ_* environment variables; the options below override them."
    )
    # The publisher does not use the database.
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        cli.add_publisher_arguments(parser)

    def make_service(self, settings: Settings, options: dict[str, Any]) -> Service:
        from django_eventmq.pubsub.publisher import Publisher

        return Publisher(settings, hwm=options["hwm"])
