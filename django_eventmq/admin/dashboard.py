"""The admin dashboard: live queues, throughput, job managers, failures and due schedules.

Two staff-only views, the pages of :class:`DashboardAdmin` (the admin of a
table-less proxy model, so the admin index links it):
``admin/django_eventmq/dashboard/`` (the page) and ``.../dashboard/data/``
(the JSON it polls every ~2 s). The router is read through its admin socket
with a short timeout; when it does not answer the page says "router
unreachable" and still shows failures and schedules from the database.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, URLPattern, path, reverse
from django.utils import timezone

from django_eventmq.cli import status
from django_eventmq.models.dashboard import Dashboard
from django_eventmq.models.results import JobResult, JobStatus
from django_eventmq.models.schedules import Schedule
from django_eventmq.runtime.config import get_settings

#: How long the page waits for each admin answer: a dead router must not stall it.
ROUTER_TIMEOUT = 0.5
#: Samples kept for the charts (one per poll, at most one a second: ~5 minutes).
SAMPLES = 300
MIN_SAMPLE_SPACING = 1.0
FAILURES_SHOWN = 10
SCHEDULES_SHOWN = 10
FAILED = (JobStatus.FAILED, JobStatus.TIMED_OUT)


class _Samples:
    """A ring of (time, waiting by queue, jobs/s by queue) shared by this process's requests."""

    def __init__(self, size: int = SAMPLES) -> None:
        self._lock = threading.Lock()
        self._ring: deque[dict[str, Any]] = deque(maxlen=size)
        self._previous: status.Snapshot | None = None

    def add(self, snap: status.Snapshot) -> dict[str, Any]:
        """Summarise ``snap`` against the last snapshot; keep a sample if one is due."""
        with self._lock:
            previous = self._previous
            summary = status.summarize(snap, previous)
            if snap.error:
                return summary
            if previous is None or snap.taken_at - previous.taken_at >= MIN_SAMPLE_SPACING:
                self._previous = snap
                if previous is not None:
                    self._ring.append(
                        {
                            "t": time.time(),
                            "waiting": {q["queue"]: q["waiting"] for q in summary["queues"]},
                            "in_flight": {q["queue"]: q["in_flight"] for q in summary["queues"]},
                            "rate": {q["queue"]: q["jobs_per_s"] or 0.0 for q in summary["queues"]},
                        }
                    )
            return summary

    def list(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._ring)

    def clear(self) -> None:
        with self._lock:
            self._ring.clear()
            self._previous = None


samples = _Samples()


def _change_url(model: type[Any], pk: int) -> str | None:
    try:
        return reverse(f"admin:django_eventmq_{model._meta.model_name}_change", args=[pk])
    except NoReverseMatch:
        return None


def recent_failures(request: HttpRequest, limit: int = FAILURES_SHOWN) -> list[dict[str, Any]]:
    """The last failed or timed-out jobs, linked to their result rows if the user may view them."""
    may_view = request.user.has_perm("django_eventmq.view_jobresult")
    rows = JobResult.objects.filter(status__in=FAILED).order_by("-updated")[:limit]
    return [
        {
            "msgid": r.msgid,
            "job": r.job,
            "queue": r.queue,
            "status": r.status,
            "error": f"{r.exc_type}: {r.exc_message}" if r.exc_type else r.exc_message,
            "when": (r.finished or r.updated).isoformat(),
            "url": _change_url(JobResult, r.pk) if may_view else None,
        }
        for r in rows
    ]


def schedules_due(request: HttpRequest, limit: int = SCHEDULES_SHOWN) -> list[dict[str, Any]]:
    """Enabled schedules by next run, soonest first."""
    may_view = request.user.has_perm("django_eventmq.view_schedule")
    rows = Schedule.objects.filter(enabled=True, next_run__isnull=False).order_by("next_run")
    return [
        {
            "name": str(s),
            "job": f"{s.path}.{s.callable}",
            "queue": s.queue,
            "timing": s.describe_timing(),
            "next_run": s.next_run.isoformat() if s.next_run else None,
            "url": _change_url(Schedule, s.pk) if may_view else None,
        }
        for s in rows[:limit]
    ]


def dashboard_data(request: HttpRequest) -> JsonResponse:
    """The JSON the dashboard polls: router summary, samples, failures, schedules."""
    snap = status.fetch(get_settings().admin_addr, timeout=ROUTER_TIMEOUT)
    summary = samples.add(snap)
    return JsonResponse(
        {
            "now": timezone.now().isoformat(),
            "router": summary,
            "workers_alive": len(summary["job_managers"]),
            "samples": samples.list(),
            "failures": recent_failures(request),
            "schedules": schedules_due(request),
        }
    )


if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Dashboard]
else:  # ModelAdmin takes no type argument at run time
    _ModelAdmin = admin.ModelAdmin


@admin.register(Dashboard)
class DashboardAdmin(_ModelAdmin):
    """The dashboard's two views, where the admin puts a model's pages.

    ``admin/django_eventmq/dashboard/`` is the page (and the "changelist" the
    admin index links), ``.../data/`` the JSON it polls. Any active staff
    member may open both, as before the dashboard had a model: the admin
    site's own login check, and no model permission on top.
    """

    def get_urls(self) -> list[URLPattern]:
        page = self.admin_site.admin_view(self.dashboard_view)
        data = self.admin_site.admin_view(self.data_view)
        return [
            path("", page, name="django_eventmq_dashboard"),
            path("data/", data, name="django_eventmq_dashboard_data"),
            # The name the admin index reverses for a model's row: the same page.
            path("", page, name="django_eventmq_dashboard_changelist"),
        ]

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        """The dashboard page; its script fills it from :meth:`data_view`."""
        self._check_view(request)
        context = {
            **self.admin_site.each_context(request),
            "title": "EventMQ dashboard",
            "opts": self.opts,
            "data_url": reverse(f"{self.admin_site.name}:django_eventmq_dashboard_data"),
            "poll_ms": 2000,
        }
        return TemplateResponse(request, "django_eventmq/dashboard.html", context)

    def data_view(self, request: HttpRequest) -> JsonResponse:
        self._check_view(request)
        return dashboard_data(request)

    def _check_view(self, request: HttpRequest) -> None:
        if not self.has_view_permission(request):
            raise PermissionDenied

    def has_module_permission(self, request: HttpRequest) -> bool:
        # Lists the app in the index for staff with no model permission at all.
        return _is_staff(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return _is_staff(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _is_staff(request: HttpRequest) -> bool:
    return bool(request.user.is_active and request.user.is_staff)
