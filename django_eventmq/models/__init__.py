"""Models of the django_eventmq app.

Each feature keeps its models in its own module, imported here so Django
finds them: results in :mod:`.results`, schedules in :mod:`.schedules`, the
admin dashboard's table-less proxy in :mod:`.dashboard`, the transactional
outbox in :mod:`.outbox`.
"""

from __future__ import annotations

from django_eventmq.models.dashboard import Dashboard as Dashboard
from django_eventmq.models.dead_letters import DeadLetter as DeadLetter
from django_eventmq.models.outbox import OutboxJob as OutboxJob
from django_eventmq.models.results import JobResult as JobResult
from django_eventmq.models.schedules import Schedule, ScheduleRun
from django_eventmq.models.workflows import Workflow as Workflow
from django_eventmq.models.workflows import WorkflowStep as WorkflowStep

__all__ = ["Schedule", "ScheduleRun"]
