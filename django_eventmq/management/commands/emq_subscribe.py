"""``manage.py emq_subscribe``: run the ``@subscriber`` handlers of every installed app."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import close_old_connections
from django.utils.module_loading import autodiscover_modules

from django_eventmq import conf
from django_eventmq.cli import options as cli
from django_eventmq.errors import EventMQError


class Command(BaseCommand):
    help = (
        "Run an EventMQ subscriber: connects to the publisher's outgoing address, subscribes "
        "to the prefix of every @subscriber handler (found in each installed app's "
        "subscribers.py) and runs the matching handlers for each event, until SIGTERM/SIGINT. "
        "A handler that raises is logged and the subscriber keeps going."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        cli.add_subscriber_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        from django_eventmq.pubsub.api import Consumer, import_subscriber_modules

        try:
            settings = conf.settings_with_options(options)
            cli.configure_logging(options["log_level"])
            # Like jobs.py: importing every app's subscribers.py registers its handlers.
            autodiscover_modules("subscribers")
            import_subscriber_modules(options["subscriber_modules"])
            # Stale database connections are closed around each event, as Django
            # does around each request.
            consumer = Consumer(settings, around=close_old_connections)
        except EventMQError as exc:
            raise CommandError(str(exc)) from None
        try:
            # Connecting happens here (a CURVE key the settings lack, ...): say
            # what to fix as the other commands do, not with a traceback.
            consumer.run()
        except EventMQError as exc:
            raise CommandError(str(exc)) from None
