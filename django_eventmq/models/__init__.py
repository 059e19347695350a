"""Models of the django_eventmq app.

Each feature keeps its models in its own module, imported here so Django
finds them: schedules in :mod:`.scheduling_models`.
"""

from __future__ import annotations

from django_eventmq.models.results import JobResult as JobResult
from django_eventmq.models.schedules import Schedule, ScheduleRun

__all__ = ["Schedule", "ScheduleRun"]
