"""The app's admin index links the dashboard (a view, so Django lists no entry for it)."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db


def test_the_app_index_links_the_dashboard(admin_client):
    page = admin_client.get(reverse("admin:app_list", args=["django_eventmq"]))
    assert page.status_code == 200
    html = page.content.decode()
    link = re.search(r'<a href="([^"]+)">EventMQ dashboard</a>', html)
    assert link is not None, html
    assert link.group(1) == reverse("admin:django_eventmq_dashboard")
    # The app's own models are still listed below the link.
    assert reverse("admin:django_eventmq_jobresult_changelist") in html
    assert admin_client.get(link.group(1)).status_code == 200
