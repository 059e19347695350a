"""The dashboard's place in the admin: a model with no table of its own.

The admin lists models, not views. A proxy of :class:`JobResult` (no table,
no column: the migration only records it) gives the dashboard a row in the
admin index, its URLs under ``admin/django_eventmq/dashboard/`` through its
``ModelAdmin`` (:mod:`django_eventmq.admin.dashboard`), and its permission
checks through that admin. Nothing queries it.
"""

from __future__ import annotations

from django_eventmq.models.results import JobResult


class Dashboard(JobResult):
    class Meta:
        proxy = True
        verbose_name = "EventMQ dashboard"
        verbose_name_plural = "EventMQ dashboard"
        # Any active staff member may open it (as before it was a model): no
        # add/change/delete/view permissions to create, grant or check.
        default_permissions = ()
