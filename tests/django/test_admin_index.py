"""The admin lists the dashboard as a model (a table-less proxy): its row opens the page."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

pytestmark = pytest.mark.django_db

ROW = re.compile(r'<a href="([^"]+)"[^>]*>EventMQ dashboard</a>')


def dashboard_link(html: str) -> str:
    link = ROW.search(html)
    assert link is not None, html
    return link.group(1)


def test_the_app_index_links_the_dashboard(admin_client):
    page = admin_client.get(reverse("admin:app_list", args=["django_eventmq"]))
    assert page.status_code == 200
    html = page.content.decode()
    assert dashboard_link(html) == reverse("admin:django_eventmq_dashboard")
    # The app's own models are still listed next to it.
    assert reverse("admin:django_eventmq_jobresult_changelist") in html
    assert admin_client.get(dashboard_link(html)).status_code == 200


def test_the_site_index_links_the_dashboard_and_offers_no_add_or_change(admin_client):
    html = admin_client.get(reverse("admin:index")).content.decode()
    assert dashboard_link(html) == "/admin/django_eventmq/dashboard/"
    assert reverse("admin:django_eventmq_dashboard_changelist") == dashboard_link(html)
    assert "/admin/django_eventmq/dashboard/add/" not in html


def test_staff_without_any_permission_see_only_the_dashboard(client):
    # The dashboard needs staff status only (as before it had a model); the
    # result and schedule rows need their own view permissions.
    client.force_login(User.objects.create_user("staff", password="x", is_staff=True))
    html = client.get(reverse("admin:app_list", args=["django_eventmq"])).content.decode()
    assert dashboard_link(html) == reverse("admin:django_eventmq_dashboard")
    assert reverse("admin:django_eventmq_jobresult_changelist") not in html
    assert client.get(dashboard_link(html)).status_code == 200


def breadcrumbs(html: str) -> str:
    """The opening tag inside the admin's breadcrumbs <nav> (``<ol class="breadcrumbs">``
    from Django 6 on, ``<div class="breadcrumbs">`` before)."""
    nav = re.search(r'<nav aria-label="Breadcrumbs">\s*(<\w+ class="breadcrumbs">)', html)
    assert nav is not None, html
    return nav.group(1)


def test_the_dashboard_breadcrumbs_take_the_admins_own_form(admin_client):
    # The admin's stylesheet styles only the form its own pages use: a <div> under
    # Django 6 was an unstyled bar (no background, links in a column).
    admins = breadcrumbs(admin_client.get(reverse("admin:password_change")).content.decode())
    html = admin_client.get(reverse("admin:django_eventmq_dashboard")).content.decode()
    assert breadcrumbs(html) == admins
    crumbs = html[html.index(admins) : html.index("</nav>", html.index(admins))]
    assert re.findall(r'<a href="([^"]+)">', crumbs) == [
        reverse("admin:index"),
        reverse("admin:app_list", args=["django_eventmq"]),
    ]
    assert "Dashboard" in crumbs
