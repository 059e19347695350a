"""Django admin for django_eventmq; each feature's admin lives in its own module."""

from __future__ import annotations

from django_eventmq.admin.dashboard import DashboardAdmin as DashboardAdmin
from django_eventmq.admin.dead_letters import DeadLetterAdmin as DeadLetterAdmin
from django_eventmq.admin.outbox import OutboxJobAdmin as OutboxJobAdmin
from django_eventmq.admin.results import JobResultAdmin as JobResultAdmin
from django_eventmq.admin.schedules import ScheduleAdmin
from django_eventmq.admin.workflows import WorkflowAdmin as WorkflowAdmin

__all__ = ["ScheduleAdmin"]
