"""``manage.py emq_jobmanager``: run an EventMQ job manager with Django in every worker."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser
from django.db import connections

from django_eventmq.cli import options as cli
from django_eventmq.management.process_command import ProcessCommand
from django_eventmq.runtime.service import Service
from django_eventmq.runtime.settings import Settings

#: Sets Django up in each worker and closes stale DB connections around each job.
DJANGO_HOOKS = "django_eventmq.worker_hooks"


class Command(ProcessCommand):
    help = (
        "Run an EventMQ job manager: connects to the router's backend and runs the jobs of "
        "its queues in a pool of worker processes, each with Django set up, until "
        "SIGTERM/SIGINT (running jobs may finish first). @job functions in every installed "
        "app's jobs.py are found automatically. Settings come from settings.EVENTMQ and "
        "EMQ_* environment variables; the options below override them."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        cli.add_jobmanager_arguments(parser, hooks_default=DJANGO_HOOKS, metrics=True)

    def make_service(self, settings: Settings, options: dict[str, Any]) -> Service:
        # Worker processes are forked from this one: they must not share its
        # database sockets, so close them before the pool starts.
        connections.close_all()
        from django_eventmq.jobmanager.manager import JobManager

        return JobManager(settings, hooks=options["hooks"])

    def metrics_registry(self, metrics: Any, service: Service, settings: Settings) -> Any:
        return metrics.jobmanager_registry(service)
