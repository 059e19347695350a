from __future__ import annotations

from django.urls import path

from . import views

app_name = "shop"

urlpatterns = [
    path("", views.index, name="index"),
    path("signup/", views.signup, name="signup"),
    path("report/", views.report, name="report"),
    path("status/", views.status, name="status"),
    path("order/", views.order, name="order"),
]
