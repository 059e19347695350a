"""Admin for the outbox: the jobs committed and not acknowledged by a router yet.

Rows normally live a moment (their process deletes them after the router's
ACK) or a few seconds (the scheduler relays them). One that stays says the
relay is not running or cannot send it (its log says why): it can be read
here, and deleted, never edited.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.http import HttpRequest

from django_eventmq.models.outbox import OutboxJob

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[OutboxJob]
else:  # ModelAdmin takes no type argument at run time
    _ModelAdmin = admin.ModelAdmin


@admin.register(OutboxJob)
class OutboxJobAdmin(_ModelAdmin):
    """Outbox rows, read-only; a row may be deleted (the job is then never sent)."""

    list_display = ("msgid", "queue", "created")
    list_filter = ("queue",)
    search_fields = ("=msgid",)
    readonly_fields = ("msgid", "queue", "headers", "body", "created")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
