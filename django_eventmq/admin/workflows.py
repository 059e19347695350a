"""Admin for workflows: status, stages, each member with its results row; a cancel action."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from django_eventmq.client.workflows import member_msgid
from django_eventmq.errors import EventMQError
from django_eventmq.models.results import JobResult
from django_eventmq.models.workflows import Workflow, WorkflowStatus

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Workflow]
else:  # ModelAdmin takes no type argument at run time
    _ModelAdmin = admin.ModelAdmin


@admin.register(Workflow)
class WorkflowAdmin(_ModelAdmin):
    """Workflows as they run; nothing here edits them but the cancel action."""

    list_display = ("workflow_id", "kind", "status", "stages_done", "failed_msgid", "created")
    list_filter = ("status", "kind", ("created", admin.DateFieldListFilter))
    search_fields = ("=workflow_id", "=failed_msgid")
    ordering = ("-created",)
    actions = ("cancel",)
    readonly_fields = ("members", "pretty_result")
    exclude = ("stages", "result")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="stage")
    def stages_done(self, obj: Workflow) -> str:
        return f"{obj.stage + 1}/{len(obj.stages)}"

    @admin.display(description="result")
    def pretty_result(self, obj: Workflow) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.result, indent=2, default=str))

    @admin.display(description="members")
    def members(self, obj: Workflow) -> str:
        """One line per member: its place, job, results row (linked) and status."""
        places = [
            (stage, index, member)
            for stage, members in enumerate(obj.stages)
            for index, member in enumerate(members)
        ]
        msgids = [member_msgid(obj.workflow_id, stage, index) for stage, index, _ in places]
        rows = {row.msgid: row for row in JobResult.objects.filter(msgid__in=msgids)}
        lines = []
        for (stage, index, member), msgid in zip(places, msgids, strict=True):
            row = rows.get(msgid)
            name = f"{member.get('path')}.{member.get('callable')}"
            if row is None:
                lines.append((stage, index, name, msgid, "not sent" if stage > obj.stage else "-"))
                continue
            url = reverse("admin:django_eventmq_jobresult_change", args=(row.pk,))
            link = format_html('<a href="{}">{}</a>', url, msgid)
            lines.append((stage, index, name, link, row.status))
        return format_html(
            "<table><tr><th>stage</th><th>member</th><th>job</th><th>result row</th>"
            "<th>status</th></tr>{}</table>",
            format_html_join(
                "",
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                lines,
            ),
        )

    @admin.action(description="Cancel the selected workflows")
    def cancel(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> None:
        from django_eventmq.workflows import WorkflowHandle

        done = 0
        for row in queryset.filter(status=WorkflowStatus.RUNNING):
            try:
                WorkflowHandle(row.workflow_id).cancel()
            except EventMQError as exc:
                self.message_user(request, f"{row.workflow_id}: {exc}", messages.ERROR)
                continue
            done += 1
        self.message_user(request, f"Cancelled {done} workflow(s).", messages.SUCCESS)
