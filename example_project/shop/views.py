"""Pages of the example shop: a sign-up form and a report button that queue jobs."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from django_eventmq import publish

from .forms import ReportForm, SignUpForm
from .jobs import build_report, send_welcome
from .models import Report, SentEmail


def index(request: HttpRequest) -> HttpResponse:
    """The home page: sign up (queues a welcome e-mail) or ask for a report."""
    return render(
        request, "shop/index.html", {"signup_form": SignUpForm(), "report_form": ReportForm()}
    )


@require_POST
def signup(request: HttpRequest) -> HttpResponse:
    form = SignUpForm(request.POST)
    if not form.is_valid():
        return render(
            request,
            "shop/index.html",
            {"signup_form": form, "report_form": ReportForm()},
            status=400,
        )
    msgid = send_welcome.delay(form.cleaned_data["email"])
    messages.success(request, f"Welcome e-mail queued (job {msgid}).")
    return redirect("shop:status")


@require_POST
def report(request: HttpRequest) -> HttpResponse:
    form = ReportForm(request.POST)
    if not form.is_valid():
        return render(
            request,
            "shop/index.html",
            {"signup_form": SignUpForm(), "report_form": form},
            status=400,
        )
    msgid = build_report.delay(form.cleaned_data["name"])
    messages.success(request, f"Report queued (job {msgid}).")
    return redirect("shop:status")


@require_POST
def order(request: HttpRequest) -> HttpResponse:
    """Announce a new order: every subscriber of ``orders.`` hears about it."""
    msgid = publish("orders.created", {"item": request.POST.get("item", "")})
    messages.success(request, f"Order announced (event {msgid}).")
    return redirect("shop:status")


def status(request: HttpRequest) -> HttpResponse:
    """What the jobs did so far: the recorded e-mails and the reports."""
    return render(
        request,
        "shop/status.html",
        {
            "emails": SentEmail.objects.all()[:50],
            "reports": Report.objects.all()[:50],
        },
    )
