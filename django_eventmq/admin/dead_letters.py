"""Admin for dead letters: the results table's given-up jobs and the routers' poisoned ones.

The list is the :class:`DeadLetter` table (filter by reason, queue, job, date;
search by msgid, job, message), with the jobs the routers set aside as poisoned
above it, read over their admin sockets on each view (the same queue, job and
reason filters apply). Both can be retried or purged: a dead letter is sent again
with a new msgid (the letter keeps it) or deleted; a poisoned job is handed out
again by its router (deaths reset, same msgid) or deleted from its journal.
Retrying needs the change permission, purging the delete permission.
"""

from __future__ import annotations

import json
import operator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html

from django_eventmq import dead_letters
from django_eventmq.errors import AdminRefused, EventMQError
from django_eventmq.models.dead_letters import DeadLetter, DeadLetterReason
from django_eventmq.protocol import constants as C

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[DeadLetter]
else:  # ModelAdmin takes no type argument at run time
    _ModelAdmin = admin.ModelAdmin

#: The list filters' query parameters that also filter the routers' poisoned jobs.
_FILTERS = {"queue": "queue__exact", "job": "job__exact"}


def _in_dates(when: datetime | None, request: HttpRequest) -> bool:
    """Whether ``when`` is within the date filter's ``created__gte`` / ``created__lt`` (a
    poisoned job's date is when the router accepted it)."""
    for param, inside in (("created__gte", operator.ge), ("created__lt", operator.lt)):
        bound = _moment(request.GET.get(param))
        if bound is not None and (when is None or not inside(when, bound)):
            return False
    return True


def _moment(text: str | None) -> datetime | None:
    """The date filter's bound (a date or a datetime, as the admin writes it)."""
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if timezone.is_aware(parsed) else timezone.make_aware(parsed)


def _pretty(value: Any) -> str:
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, default=str))


@admin.register(DeadLetter)
class DeadLetterAdmin(_ModelAdmin):
    """Jobs given up; nothing here edits them."""

    change_list_template = "django_eventmq/dead_letters/change_list.html"
    list_display = (
        "msgid",
        "job",
        "queue",
        "reason",
        "exc_type",
        "attempts",
        "created",
        "retries",
        "retried_msgid",
    )
    list_filter = ("reason", "queue", "job", ("created", admin.DateFieldListFilter))
    search_fields = ("=msgid", "job", "exc_message", "=retried_msgid")
    date_hierarchy = "created"
    ordering = ("-created",)
    actions = ("retry", "purge")
    readonly_fields = (
        "pretty_args",
        "pretty_kwargs",
        "pretty_headers",
        "pretty_traceback",
    )
    exclude = ("args", "kwargs", "headers", "traceback")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # read-only detail page; retrying asks for has_retry_permission

    def has_retry_permission(self, request: HttpRequest) -> bool:
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.change_{opts.model_name}")

    @admin.display(description="args")
    def pretty_args(self, obj: DeadLetter) -> str:
        return _pretty(obj.args)

    @admin.display(description="kwargs")
    def pretty_kwargs(self, obj: DeadLetter) -> str:
        return _pretty(obj.kwargs)

    @admin.display(description="options (headers)")
    def pretty_headers(self, obj: DeadLetter) -> str:
        return _pretty(obj.headers)

    @admin.display(description="traceback")
    def pretty_traceback(self, obj: DeadLetter) -> str:
        return format_html("<pre>{}</pre>", obj.traceback)

    @admin.action(description="Retry the selected dead letters (new msgids)", permissions=["retry"])
    def retry(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> None:
        letters = list(queryset)
        try:
            sent = dead_letters.retry(letters)
        except EventMQError as exc:
            self.message_user(request, f"Could not send the jobs again: {exc}", messages.ERROR)
            return
        self.message_user(request, f"Sent {len(sent)} job(s) again, each with a new msgid.")

    @admin.action(description="Purge the selected dead letters", permissions=["delete"])
    def purge(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> None:
        count, _ = queryset.delete()
        self.message_user(request, f"Purged {count} dead letter(s).")

    # -- the routers' poisoned jobs ------------------------------------------------------
    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        found = dead_letters.read_poisoned()
        jobs = found.jobs
        wanted_reason = request.GET.get("reason__exact")
        if wanted_reason and wanted_reason != DeadLetterReason.POISONED:
            jobs = []
        for attr, param in _FILTERS.items():
            wanted = request.GET.get(param)
            if wanted:
                jobs = [job for job in jobs if getattr(job, attr) == wanted]
        jobs = [job for job in jobs if _in_dates(job.accepted, request)]
        context = {
            "poisoned": jobs,
            "poisoned_total": found.total,
            "router_errors": found.errors,
            "poisoned_url": reverse("admin:django_eventmq_deadletter_poisoned"),
            "can_retry": self.has_retry_permission(request),
            "can_purge": self.has_delete_permission(request),
            **(extra_context or {}),
        }
        return super().changelist_view(request, context)

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.poisoned_view)
        name = "django_eventmq_deadletter_poisoned"
        return [path("poisoned/", view, name=name), *super().get_urls()]

    def poisoned_view(self, request: HttpRequest) -> HttpResponse:
        """POST: retry or purge the poisoned jobs ticked (``job`` = ``router msgid``)."""
        back = reverse("admin:django_eventmq_deadletter_changelist")
        if request.method != "POST":
            return HttpResponseRedirect(back)
        do = request.POST.get("do")
        if do == "retry" and self.has_retry_permission(request):
            command, verb = C.POISONED_RETRY, "handed out again"
        elif do == "purge" and self.has_delete_permission(request):
            command, verb = C.POISONED_PURGE, "purged"
        else:
            raise PermissionDenied
        chosen = [tuple(value.split(" ", 1)) for value in request.POST.getlist("job")]
        pairs = [(addr, msgid) for addr, msgid in chosen if addr and msgid]
        if not pairs:
            self.message_user(request, "No poisoned job was selected.", messages.WARNING)
            return HttpResponseRedirect(back)
        try:
            done = dead_letters.act_on_poisoned(command, pairs)
        except AdminRefused as exc:  # no admin token here (docs/security.md)
            self.message_user(request, f"Not done: {exc}", messages.ERROR)
            return HttpResponseRedirect(back)
        except EventMQError as exc:
            self.message_user(request, f"The router did not answer: {exc}", messages.ERROR)
            return HttpResponseRedirect(back)
        missed = len(pairs) - len(done)
        text = f"{len(done)} poisoned job(s) {verb}."
        if missed:
            text += f" {missed} were no longer poisoned there."
        self.message_user(request, text, messages.SUCCESS if not missed else messages.WARNING)
        return HttpResponseRedirect(back)
