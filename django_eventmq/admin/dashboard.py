"""The admin dashboard: live queues, throughput, job managers, failures and due schedules.

Two staff-only views, the pages of :class:`DashboardAdmin` (the admin of a
table-less proxy model, so the admin index links it):
``admin/django_eventmq/dashboard/`` (the page) and ``.../dashboard/data/``
(the JSON it polls every ~2 s). The router is read through its admin socket
with a short timeout; when it does not answer the page says "router
unreachable" and still shows failures and schedules from the database.

With several routers (the ``STATUS_ADMIN_ADDRS`` setting, e.g. ``"a,b;c"``: router
groups, i.e. shards, of members) the numbers add up each shard's leader, and the
same JSON lists every router with its role and each shard's queue depths, which
the page draws as two more tables.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import django
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, URLPattern, path, reverse
from django.utils import timezone

from django_eventmq.cli import status, status_command, status_groups
from django_eventmq.errors import ConfigurationError
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


#: Turns the snapshots of the last sample (by address) into the routers' summary.
Summarize = Callable[[Mapping[str, status.Snapshot]], dict[str, Any]]


class _Samples:
    """A ring of (time, waiting by queue, jobs/s by queue) shared by this process's requests."""

    def __init__(self, size: int = SAMPLES) -> None:
        self._lock = threading.Lock()
        self._ring: deque[dict[str, Any]] = deque(maxlen=size)
        # The snapshots the last sample came from, by address (for throughput).
        self._previous: dict[str, status.Snapshot] = {}
        self._kept_at = 0.0

    def add(self, snap: status.Snapshot) -> dict[str, Any]:
        """Summarise one router's ``snap`` against the last one; keep a sample if one is due."""
        return self.add_many([snap], lambda prev: status.summarize(snap, prev.get(snap.admin_addr)))

    def add_many(self, snaps: Sequence[status.Snapshot], summarize: Summarize) -> dict[str, Any]:
        """``summarize`` (given the last snapshots) of ``snaps``; keep a sample if one is due."""
        with self._lock:
            previous = self._previous
            summary = summarize(previous)
            answered = {snap.admin_addr: snap for snap in snaps if not snap.error}
            if not answered:
                return summary
            taken_at = max(snap.taken_at for snap in answered.values())
            if not previous or taken_at - self._kept_at >= MIN_SAMPLE_SPACING:
                self._previous, self._kept_at = answered, taken_at
                if previous:
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
            self._previous = {}
            self._kept_at = 0.0


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


def _targets() -> tuple[str, tuple[tuple[str, ...], ...] | None]:
    """The routers to read (:func:`.status_command.admin_targets`) and their shards (None: one)."""
    settings = get_settings()
    target = status_command.admin_targets(None, settings.admin_addr, settings)
    return target, status_groups.admin_groups(target, "STATUS_ADMIN_ADDRS")


def read_routers() -> tuple[list[status.Snapshot], Summarize]:
    """Ask the routers; their snapshots and how to summarise them: :func:`.status.summarize`
    for one router, :func:`.status_groups.summarize_groups` for several. Bad settings (such as a
    malformed ``STATUS_ADMIN_ADDRS``) read as an unreachable router saying why."""
    try:
        target, groups = _targets()
    except ConfigurationError as exc:
        bad = status.Snapshot(admin_addr="", taken_at=0.0, error=str(exc))
        return [bad], lambda _previous: status.summarize(bad)
    if groups is None:
        snap = status.fetch(target, timeout=ROUTER_TIMEOUT, jobs=True)
        return [snap], lambda previous: status.summarize(snap, previous.get(snap.admin_addr))
    by_shard = status_groups.fetch_groups(groups, timeout=ROUTER_TIMEOUT, jobs=True)
    snaps = [snap for members in by_shard for snap in members]
    return snaps, lambda previous: status_groups.summarize_groups(by_shard, previous)


def routers_part(summary: Mapping[str, Any]) -> dict[str, Any]:
    """What the page's router table shows: every router and each shard's queues ([] for one
    router, whose page is as before)."""
    return {
        "routers": summary.get("routers", []),
        "shards": [
            {key: shard[key] for key in ("shard", "group", "members", "leader", "error")}
            | {"queues": (shard["summary"] or {}).get("queues", [])}
            for shard in summary.get("shards", [])
        ],
    }


def dashboard_data(request: HttpRequest) -> JsonResponse:
    """The JSON the dashboard polls: router summary, samples, failures, schedules."""
    summary = samples.add_many(*read_routers())
    return JsonResponse(
        {
            "now": timezone.now().isoformat(),
            "router": summary,
            **routers_part(summary),
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
    """The dashboard's views, where the admin puts a model's pages.

    ``admin/django_eventmq/dashboard/`` is the page (and the "changelist" the
    admin index links) and ``.../data/`` the JSON it polls. Any active staff
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
            "several_routers": _several_routers(),
            "poll_ms": 2000,
            # The admin styles its breadcrumbs as <ol class="breadcrumbs"> from Django 6 on
            # (a <div> before): ours take the form this Django's stylesheet knows.
            "breadcrumbs_list": django.VERSION >= (6, 0),
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


def _several_routers() -> bool:
    try:
        return _targets()[1] is not None
    except ConfigurationError:
        return False  # the data view says what is wrong


def _is_staff(request: HttpRequest) -> bool:
    return bool(request.user.is_active and request.user.is_staff)
