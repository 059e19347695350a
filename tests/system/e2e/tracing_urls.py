"""A URLconf for the tracing end-to-end test: one view that queues a job."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path

from tests.system.e2e.tracing_jobs import traced_add


def signup(request: HttpRequest) -> HttpResponse:
    return HttpResponse(str(traced_add.delay(2, 3)))


urlpatterns = [path("signup", signup)]
