"""Admin for job results: read-only, filtered by status, queue and date, with a retry action."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.module_loading import import_string

from django_eventmq.client.pool import get_client
from django_eventmq.errors import EventMQError
from django_eventmq.models.results import JobResult
from django_eventmq.protocol import EMPTY_HEADERS, JobBody, new_msgid
from django_eventmq.protocol.headers import Headers
from django_eventmq.runtime.config import get_settings

#: Characters of the last progress shown in the list.
PROGRESS_CHARS = 60


if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[JobResult]
else:  # ModelAdmin takes no type argument at run time
    _ModelAdmin = admin.ModelAdmin


@admin.register(JobResult)
class JobResultAdmin(_ModelAdmin):
    """Job results as recorded by job managers; nothing here edits them."""

    list_display = (
        "msgid",
        "job",
        "queue",
        "status",
        "last_progress",
        "attempts",
        "created",
        "duration",
        "jobmanager",
    )
    list_filter = ("status", "queue", ("created", admin.DateFieldListFilter))
    search_fields = ("=msgid", "job")
    date_hierarchy = "created"
    ordering = ("-created",)
    actions = ("retry",)
    readonly_fields = ("pretty_value", "pretty_progress", "pretty_traceback")
    exclude = ("value", "progress", "traceback")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="return value")
    def pretty_value(self, obj: JobResult) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.value, indent=2, default=str))

    @admin.display(description="progress")
    def last_progress(self, obj: JobResult) -> str:
        """The last progress the job reported, shortened for the list ("-" if none)."""
        if obj.progress is None:
            return "-"
        text = json.dumps(obj.progress, default=str)
        return text if len(text) <= PROGRESS_CHARS else text[: PROGRESS_CHARS - 1] + "\u2026"

    @admin.display(description="last progress")
    def pretty_progress(self, obj: JobResult) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.progress, indent=2, default=str))

    @admin.display(description="traceback")
    def pretty_traceback(self, obj: JobResult) -> str:
        return format_html("<pre>{}</pre>", obj.traceback)

    @admin.action(description="Run the selected jobs again", permissions=["view"])
    def retry(self, request: HttpRequest, queryset: QuerySet[JobResult]) -> None:
        settings = get_settings()
        sent = 0
        try:
            client = get_client(settings.broker_addr, send_timeout=settings.send_timeout)
            for row in queryset:
                msgid = new_msgid()
                body = _body_for(row, msgid)
                if body is None:
                    continue
                client.request(row.queue or "default", body.encode(), _retry_headers(), msgid)
                sent += 1
        except EventMQError as exc:
            self.message_user(request, f"Could not queue the jobs: {exc}", messages.ERROR)
            return
        self.message_user(request, f"Queued {sent} job(s) again, each with a new msgid.")


def _body_for(row: JobResult, msgid: str) -> JobBody | None:
    """The job body that runs ``row``'s job again (a Django task through its dispatcher)."""
    module, _, func = row.job.rpartition(".")
    if not module:
        return None
    if _is_django_task(row.job):
        from django_eventmq.tasks_backend import RUNNER_CALLABLE, RUNNER_PATH

        return JobBody(
            path=RUNNER_PATH,
            callable=RUNNER_CALLABLE,
            args=(row.job, row.args, row.kwargs, "default", msgid, time.time()),
        )
    return JobBody(path=module, callable=func, args=tuple(row.args), kwargs=row.kwargs)


def _is_django_task(path: str) -> bool:
    try:
        from django.tasks import Task
    except ImportError:  # Django < 6.0
        return False
    try:
        return isinstance(import_string(path), Task)
    except ImportError:
        return False


def _retry_headers() -> Headers:
    # A retried job reports back like the first run did (so it is recorded).
    return EMPTY_HEADERS.with_(reply_requested=True)
