"""``manage.py emq_subscribe``: run the ``@subscriber`` handlers of every installed app."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser
from django.db import close_old_connections
from django.utils.module_loading import autodiscover_modules

from django_eventmq.cli import options as cli
from django_eventmq.management.process_command import ProcessCommand
from django_eventmq.runtime.service import Service
from django_eventmq.runtime.settings import Settings


class Command(ProcessCommand):
    help = (
        "Run an EventMQ subscriber: connects to the publisher's outgoing address, subscribes "
        "to the prefix of every @subscriber handler (found in each installed app's "
        "subscribers.py) and runs the matching handlers for each event, until SIGTERM/SIGINT. "
        "A handler that raises is logged and the subscriber keeps going."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        cli.add_subscriber_arguments(parser)

    def make_service(self, settings: Settings, options: dict[str, Any]) -> Service:
        from django_eventmq.pubsub.api import Consumer, import_subscriber_modules

        # Like jobs.py: importing every app's subscribers.py registers its handlers.
        autodiscover_modules("subscribers")
        import_subscriber_modules(options["subscriber_modules"])
        # Stale database connections are closed around each event, as Django
        # does around each request.
        return Consumer(settings, around=close_old_connections)
