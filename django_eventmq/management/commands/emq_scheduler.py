"""``manage.py emq_scheduler``: run the EventMQ scheduler on the project's database."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import DatabaseError
from django.utils import timezone

from django_eventmq.cli import options as cli
from django_eventmq.client.jobs import declared_schedules
from django_eventmq.management.process_command import ProcessCommand
from django_eventmq.runtime import registry
from django_eventmq.runtime.service import Service
from django_eventmq.runtime.settings import Settings


class Command(ProcessCommand):
    help = (
        "Run the EventMQ scheduler: connects to the router's frontend as a scheduler, keeps "
        "schedules in the Schedule table (SCHEDULE/UNSCHEDULE messages, the admin, "
        "@job(schedule=...)) and sends a job request whenever one is due, and relays the jobs "
        "of the outbox table their own process did not send, until SIGTERM/SIGINT. "
        "Several schedulers may run at once: each run is sent by one of them."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        cli.add_scheduler_arguments(parser)

    def make_service(self, settings: Settings, options: dict[str, Any]) -> Service:
        from django_eventmq.schedule_database import (
            DjangoOutboxStore,
            DjangoScheduleDatabase,
            sync_declared,
        )
        from django_eventmq.scheduling.scheduler import Scheduler

        try:
            # Apps' jobs.py are imported by the app; JOB_MODULES may name more.
            registry.import_job_modules(settings.job_modules)
            kept, removed = sync_declared(declared_schedules(), now=timezone.now())
            scheduler = Scheduler(settings, DjangoScheduleDatabase(), outbox=DjangoOutboxStore())
        except DatabaseError as exc:
            # Most often a database that was never migrated: say the fix, not a traceback.
            raise CommandError(
                f"the scheduler cannot read its schedule table ({exc}); "
                "run 'manage.py migrate' for this database first"
            ) from None
        if kept or removed:
            self.stderr.write(f"schedules from code: {kept} in the table, {removed} removed")
        return scheduler
