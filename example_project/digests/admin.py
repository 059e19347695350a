from __future__ import annotations

from django.contrib import admin

from .models import DigestSent


@admin.register(DigestSent)
class DigestSentAdmin(admin.ModelAdmin):
    list_display = ["email", "day", "events", "purchases", "revenue", "deliveries", "run_id"]
    list_filter = ["run_id", "day"]
    search_fields = ["email", "msgid"]
    date_hierarchy = "day"
    readonly_fields = ["msgid", "run_id", "sent_at"]
