"""The admin dashboard's page and JSON endpoint, through Django's test client."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse
from django.utils import timezone

from django_eventmq.admin import dashboard as admin_dashboard
from django_eventmq.models.results import JobResult, JobStatus
from django_eventmq.models.schedules import Schedule
from tests.support import free_port, wait_for

pytestmark = pytest.mark.django_db

PAGE = "admin:django_eventmq_dashboard"
DATA = "admin:django_eventmq_dashboard_data"


@pytest.fixture(autouse=True)
def _fresh_samples():
    admin_dashboard.samples.clear()
    yield
    admin_dashboard.samples.clear()


def result(msgid: str, status: str, **fields: object) -> JobResult:
    now = timezone.now()
    return JobResult.objects.create(
        msgid=msgid, status=status, created=now, updated=now, queue="email", **fields
    )


def test_the_urls_live_under_the_app_in_the_admin():
    assert reverse(PAGE) == "/admin/django_eventmq/dashboard/"
    assert reverse(DATA) == "/admin/django_eventmq/dashboard/data/"


@pytest.mark.parametrize("url", [PAGE, DATA])
def test_anonymous_and_non_staff_users_are_sent_to_the_login(client, url):
    response = client.get(reverse(url))
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")
    client.force_login(User.objects.create_user("plain", password="x"))
    response = client.get(reverse(url))
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_the_page_loads_its_script_and_names_its_data_url(admin_client):
    response = admin_client.get(reverse(PAGE))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-url="/admin/django_eventmq/dashboard/data/"' in html
    assert "django_eventmq/dashboard.js" in html
    assert 'id="emq-depth-chart"' in html


def test_data_from_a_live_router(admin_client, site, eventmq_settings):
    eventmq_settings(ADMIN_ADDR=site.admin)
    first = admin_client.get(reverse(DATA)).json()
    assert first["router"]["reachable"] is True
    assert first["workers_alive"] == 1
    (manager,) = first["router"]["job_managers"]
    assert manager["queues"] == [[30, "email"], [10, "default"]]
    assert {q["queue"] for q in first["router"]["queues"]} >= {"email", "default"}

    site.send("email", "noop", 1)
    # Successive polls (at least a second apart) become chart samples with a rate.
    data = wait_for(
        lambda: (d := admin_client.get(reverse(DATA)).json())["samples"] and d,
        30,
        "a chart sample",
        poll=0.2,
    )
    sample = data["samples"][-1]
    assert set(sample) == {"t", "waiting", "in_flight", "rate"}
    assert "email" in sample["waiting"]


def test_an_unreachable_router_is_reported_and_the_rest_still_shows(admin_client, eventmq_settings):
    eventmq_settings(ADMIN_ADDR=f"tcp://127.0.0.1:{free_port()}")
    result(
        "failed-1", JobStatus.FAILED, job="shop.jobs.send", exc_type="ValueError", exc_message="x"
    )
    data = admin_client.get(reverse(DATA)).json()
    assert data["router"]["reachable"] is False
    assert data["router"]["error"].startswith("router unreachable: no answer to STATUS")
    assert data["workers_alive"] == 0
    assert [f["msgid"] for f in data["failures"]] == ["failed-1"]


def test_failures_link_to_their_result_rows_newest_first(admin_client, eventmq_settings):
    eventmq_settings(ADMIN_ADDR=f"tcp://127.0.0.1:{free_port()}")
    old = result("old", JobStatus.TIMED_OUT, job="a.b")
    new = result("new", JobStatus.FAILED, job="a.c", exc_type="KeyError", exc_message="'k'")
    result("fine", JobStatus.SUCCEEDED)
    failures = admin_client.get(reverse(DATA)).json()["failures"]
    assert [f["msgid"] for f in failures] == ["new", "old"]
    assert failures[0]["error"] == "KeyError: 'k'"
    assert failures[0]["url"] == f"/admin/django_eventmq/jobresult/{new.pk}/change/"
    assert failures[1]["url"] == f"/admin/django_eventmq/jobresult/{old.pk}/change/"
    assert admin_client.get(failures[0]["url"]).status_code == 200


def test_schedules_due_next_soonest_first_enabled_only(admin_client, eventmq_settings):
    eventmq_settings(ADMIN_ADDR=f"tcp://127.0.0.1:{free_port()}")
    now = timezone.now()
    # nohaste: the first run is one period after ``now``, so the order is known.
    for name, interval, enabled in (
        ("hourly", 3600, True),
        ("minutely", 60, True),
        ("off", 5, False),
    ):
        Schedule(
            name=name,
            path="tests.system.ops.jobs",
            callable="noop",
            args=[interval],
            interval=interval,
            nohaste=True,
            enabled=enabled,
        ).save(now=now)
    schedules = admin_client.get(reverse(DATA)).json()["schedules"]
    assert [s["name"] for s in schedules] == ["minutely", "hourly"]
    assert schedules[0]["queue"] == "default"
    assert schedules[0]["url"].startswith("/admin/django_eventmq/schedule/")


def test_staff_without_view_permission_get_no_links(client, eventmq_settings):
    eventmq_settings(ADMIN_ADDR=f"tcp://127.0.0.1:{free_port()}")
    result("f", JobStatus.FAILED)
    staff = User.objects.create_user("staff", password="x", is_staff=True)
    client.force_login(staff)
    (failure,) = client.get(reverse(DATA)).json()["failures"]
    assert failure["url"] is None
    staff.user_permissions.add(Permission.objects.get(codename="view_jobresult"))
    staff = User.objects.get(pk=staff.pk)  # drop the permission cache
    client.force_login(staff)
    (failure,) = client.get(reverse(DATA)).json()["failures"]
    assert failure["url"].endswith("/change/")
