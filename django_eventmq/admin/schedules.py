"""Admin for schedules: list with timing in words and next runs, validated edits, actions.

An edit saved here bumps the row's revision; a running ``emq_scheduler``
reloads it at its next poll (``SCHEDULER_POLL_INTERVAL``, 1 s by default).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from zoneinfo import available_timezones

from django import forms
from django.apps import apps
from django.contrib import admin, messages
from django.db.models import F, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html_join

from django_eventmq.client.pool import get_client
from django_eventmq.errors import EventMQError
from django_eventmq.models.schedules import Schedule, ScheduleRun
from django_eventmq.protocol import Headers, new_msgid, parse_headers
from django_eventmq.runtime.config import get_settings

#: Fire times shown in the list.
PREVIEW_RUNS = 3


def send_run_now(row: Schedule, *, send: Callable[[str, str, Headers, str], str]) -> str:
    """Send one run of ``row`` right away (admin "run now"); returns its msgid.

    ``send(queue, body_text, headers, msgid)`` is the client's ``request``.
    The regular timing is not touched.
    """
    msgid = new_msgid()
    now = timezone.now()
    ScheduleRun.objects.create(schedule=row, fire_time=now, msgid=msgid, claimed_by="admin")
    headers = parse_headers(row.headers).with_(reply_requested=True)
    send(row.queue, row.job_body().encode(), headers, msgid)
    Schedule.objects.filter(pk=row.pk).update(
        total_runs=F("total_runs") + 1, last_run=now, last_msgid=msgid
    )
    return msgid


def _timezone_choices() -> list[tuple[str, str]]:
    return [(name, name) for name in sorted(available_timezones())]


class ScheduleForm(forms.ModelForm):  # type: ignore[type-arg]
    """The schedule form: a timezone picker, JSON arguments; the model checks the rest."""

    timezone = forms.TypedChoiceField(choices=_timezone_choices, initial="UTC")

    class Meta:
        model = Schedule
        fields = (
            "name",
            "enabled",
            "path",
            "callable",
            "args",
            "kwargs",
            "queue",
            "headers",
            "interval",
            "cron",
            "timezone",
            "nohaste",
            "run_count",
        )


class TimingKindFilter(admin.SimpleListFilter):
    title = "timing"
    parameter_name = "timing"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("interval", "interval"), ("cron", "cron")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> QuerySet[Schedule]:
        if self.value() == "interval":
            return queryset.filter(interval__isnull=False)
        if self.value() == "cron":
            return queryset.exclude(cron="")
        return queryset


if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Schedule]
else:  # ModelAdmin takes no type argument at run time
    _ModelAdmin = admin.ModelAdmin


@admin.register(Schedule)
class ScheduleAdmin(_ModelAdmin):
    form = ScheduleForm
    list_display = (
        "__str__",
        "queue",
        "timing_in_words",
        "next_runs",
        "last_run",
        "last_result",
        "enabled",
        "source",
    )
    list_editable = ("enabled",)
    list_filter = ("enabled", "source", TimingKindFilter, "queue")
    search_fields = ("name", "path", "callable", "queue", "cron")
    readonly_fields = (
        "source",
        "next_runs",
        "last_run",
        "total_runs",
        "runs_left",
        "last_result",
        "recent_runs",
        "key",
        "job_key",
        "created_at",
        "updated_at",
    )
    fieldsets = (
        (None, {"fields": ("name", "enabled", "source")}),
        ("Job", {"fields": ("path", "callable", "args", "kwargs", "queue", "headers")}),
        ("Timing", {"fields": ("interval", "cron", "timezone", "nohaste", "run_count")}),
        (
            "State",
            {
                "fields": (
                    "next_runs",
                    "last_run",
                    "total_runs",
                    "runs_left",
                    "last_result",
                    "recent_runs",
                    "key",
                    "job_key",
                    "created_at",
                    "updated_at",
                )
            },
        ),
    )
    actions = ("run_now", "enable", "disable")

    @admin.display(description="timing")
    def timing_in_words(self, obj: Schedule) -> str:
        return obj.describe_timing()

    @admin.display(description="next runs")
    def next_runs(self, obj: Schedule) -> str:
        if obj.pk is None:
            return "-"
        try:
            times = obj.upcoming(PREVIEW_RUNS)
        except ValueError:
            return "invalid timing"
        if not times:
            return "finished" if obj.runs_left == 0 else "-"
        zone = obj.timing().zone if obj.cron else timezone.get_current_timezone()
        return format_html_join(
            ", ",
            "<span>{}</span>",
            ((t.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z"),) for t in times),
        )

    @admin.display(description="last result")
    def last_result(self, obj: Schedule) -> str:
        if not obj.last_msgid:
            return "-"
        result = _job_result(obj.last_msgid)
        if result is not None:
            return result
        run = ScheduleRun.objects.filter(msgid=obj.last_msgid).only("result").first()
        if run is not None and run.result:
            return _short(run.result)
        return f"sent (msgid {obj.last_msgid})"

    @admin.display(description="recent runs")
    def recent_runs(self, obj: Schedule) -> str:
        if obj.pk is None:
            return "-"
        runs = obj.runs.order_by("-fire_time")[:10]
        return (
            format_html_join(
                "",
                "<div>{} &middot; {} &middot; {} {}</div>",
                (
                    (
                        r.fire_time.isoformat(),
                        r.msgid,
                        r.claimed_by,
                        _short(r.result) if r.result else "",
                    )
                    for r in runs
                ),
            )
            or "-"
        )

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        if not change:
            obj.source = Schedule.Source.ADMIN
        super().save_model(request, obj, form, change)

    @admin.action(description="Run selected schedules now")
    def run_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        settings = get_settings()
        if not settings.broker_addr:
            self.message_user(request, "BROKER_ADDR is not set: cannot send.", messages.ERROR)
            return
        client = get_client(settings.broker_addr, send_timeout=settings.send_timeout)
        sent = 0
        for row in queryset:
            try:
                send_run_now(row, send=client.request)
            except EventMQError as exc:
                self.message_user(request, f"{row}: {exc}", messages.ERROR)
                continue
            sent += 1
        self.message_user(request, f"Sent {sent} run(s).", messages.SUCCESS)

    @admin.action(description="Enable selected schedules")
    def enable(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._set_enabled(request, queryset, True)

    @admin.action(description="Disable selected schedules")
    def disable(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._set_enabled(request, queryset, False)

    def _set_enabled(
        self, request: HttpRequest, queryset: QuerySet[Schedule], enabled: bool
    ) -> None:
        changed = 0
        for row in queryset:
            if row.enabled != enabled:
                row.enabled = enabled
                row.save(update_fields=["enabled", "updated_at"])  # save() bumps the revision
                changed += 1
        state = "enabled" if enabled else "disabled"
        self.message_user(request, f"{changed} schedule(s) {state}.", messages.SUCCESS)


def _short(text: str, limit: int = 80) -> str:
    with contextlib.suppress(ValueError, AttributeError):
        text = json.dumps(json.loads(text).get("value", text))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _job_result(msgid: str) -> str | None:
    """The job's stored result, when the app has a result model (added separately)."""
    try:
        model = apps.get_model("django_eventmq", "JobResult")
    except LookupError:
        return None
    field_names = {f.name for f in model._meta.get_fields()}
    if "msgid" not in field_names:
        return None
    row = model.objects.filter(msgid=msgid).first()
    if row is None:
        return None
    status = getattr(row, "status", "")
    return f"{status} (msgid {msgid})" if status else f"done (msgid {msgid})"
