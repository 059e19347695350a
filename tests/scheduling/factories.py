"""factory-boy factories for schedules and their runs."""

from __future__ import annotations

import uuid

import factory
from django.utils import timezone

from django_eventmq.models import Schedule, ScheduleRun


class ScheduleFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Schedule

    path = "tests.scheduling.jobs"
    callable = "touch"
    args = factory.Sequence(lambda n: [f"/tmp/emq-schedule-{n}"])
    kwargs = factory.LazyFunction(dict)
    queue = "default"
    interval = 60
    cron = ""
    timezone = "UTC"
    nohaste = True
    source = Schedule.Source.ADMIN

    class Params:
        daily_berlin = factory.Trait(interval=None, cron="30 2 * * *", timezone="Europe/Berlin")


class ScheduleRunFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ScheduleRun

    schedule = factory.SubFactory(ScheduleFactory)
    fire_time = factory.LazyFunction(timezone.now)
    msgid = factory.LazyFunction(lambda: str(uuid.uuid4()))
    claimed_by = "tests"
