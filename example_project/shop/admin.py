from __future__ import annotations

from django.contrib import admin

from .models import Report, SentEmail


@admin.register(SentEmail)
class SentEmailAdmin(admin.ModelAdmin):
    list_display = ["to", "subject", "sent_at"]
    search_fields = ["to", "subject"]
    date_hierarchy = "sent_at"


@admin.register(Report)
class ReportAdmin(admin.ModelAdmin):
    list_display = ["name", "rows", "created"]
    search_fields = ["name"]
    date_hierarchy = "created"
