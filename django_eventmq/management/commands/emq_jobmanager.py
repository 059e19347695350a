"""``manage.py emq_jobmanager``: run an EventMQ job manager with Django in every worker."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from django_eventmq import conf
from django_eventmq.cli import options as cli
from django_eventmq.errors import EventMQError

#: Sets Django up in each worker and closes stale DB connections around each job.
DJANGO_HOOKS = "django_eventmq.worker_hooks"


class Command(BaseCommand):
    help = (
        "Run an EventMQ job manager: connects to the router's backend and runs the jobs of "
        "its queues in a pool of worker processes, each with Django set up, until "
        "SIGTERM/SIGINT (running jobs may finish first). @job functions in every installed "
        "app's jobs.py are found automatically. Settings come from settings.EVENTMQ and "
        "EMQ_* environment variables; the options below override them."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        cli.add_jobmanager_arguments(parser, hooks_default=DJANGO_HOOKS, metrics=True)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            settings = conf.settings_with_options(options)
            # Before anything starts: --metrics without its extra is one line, not a traceback.
            metrics = cli.metrics_module() if options.get("metrics") else None
        except EventMQError as exc:
            raise CommandError(str(exc)) from None
        cli.configure_logging(options["log_level"])
        # Worker processes are forked from this one: they must not share its
        # database sockets, so close them before the pool starts.
        connections.close_all()
        from django_eventmq.jobmanager.manager import JobManager

        try:
            manager = JobManager(settings, hooks=options["hooks"])
        except EventMQError as exc:
            raise CommandError(str(exc)) from None
        server = None
        if metrics is not None:
            try:
                server = metrics.start_metrics_server(
                    options["metrics"], metrics.jobmanager_registry(manager)
                )
            except EventMQError as exc:
                raise CommandError(str(exc)) from None
        try:
            manager.run()
        except EventMQError as exc:
            raise CommandError(str(exc)) from None
        finally:
            if server is not None:
                server.close()
