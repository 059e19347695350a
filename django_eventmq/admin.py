"""Django admin for django_eventmq; each feature's admin lives in its own module."""

from __future__ import annotations

from . import admin_dashboard as admin_dashboard
from .admin_results import JobResultAdmin as JobResultAdmin
from .admin_schedules import ScheduleAdmin

__all__ = ["ScheduleAdmin"]
