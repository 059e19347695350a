"""The schedule admin: list, filters, search, validated add/edit, actions."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_eventmq.models import Schedule, ScheduleRun
from django_eventmq.protocol import Request
from tests.fake_router import FakeRouter

from .admin_forms import schedule_form
from .factories import ScheduleFactory

pytestmark = pytest.mark.django_db
CHANGELIST = "/admin/django_eventmq/schedule/"
ADD = CHANGELIST + "add/"


def test_changelist_shows_timing_in_words_and_next_runs(admin_client) -> None:
    ScheduleFactory(name="ping", interval=300)
    ScheduleFactory(name="nightly", daily_berlin=True)
    page = admin_client.get(CHANGELIST).content.decode()
    assert "every 5 minutes" in page
    assert "cron 30 2 * * * (Europe/Berlin)" in page
    assert page.count("CET") + page.count("CEST") >= 3  # three upcoming runs, Berlin time


def test_filters_and_search(admin_client) -> None:
    ScheduleFactory(name="alpha", interval=60)
    ScheduleFactory(name="beta", daily_berlin=True, enabled=False)
    page = admin_client.get(CHANGELIST + "?timing=cron").content.decode()
    assert "beta" in page and "alpha" not in page
    page = admin_client.get(CHANGELIST + "?enabled__exact=1").content.decode()
    assert "alpha" in page and "beta" not in page
    page = admin_client.get(CHANGELIST + "?q=alp").content.decode()
    assert "alpha" in page and "beta" not in page


def test_add_creates_an_admin_schedule(admin_client) -> None:
    response = admin_client.post(
        ADD,
        schedule_form(
            name="made", cron="30 2 * * *", timezone="Europe/Berlin", args=["/tmp/q"], nohaste=True
        ),
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    row = Schedule.objects.get(name="made")
    assert row.source == "admin" and row.args == ["/tmp/q"]
    assert row.next_run == row.timing().upcoming(timezone.now(), 1)[0]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"interval": "", "cron": ""}, "either an interval"),
        ({"interval": 60, "cron": "* * * * *"}, "either an interval"),
        ({"cron": "99 * * * *"}, "not a cron expression"),
        ({"cron": "0 0 30 2 *"}, "never fires"),
        ({"interval": 60, "timezone": "Mars/Olympus"}, "Select a valid choice"),
        ({"interval": 60, "path": "not a module"}, "dotted module path"),
        ({"interval": 60, "headers": "timeout:soon"}, "whole number"),
    ],
)
def test_add_refuses_bad_input_with_a_clear_message(admin_client, values, message) -> None:
    response = admin_client.post(ADD, schedule_form(**values))
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not Schedule.objects.exists()


def test_same_job_and_timing_twice_is_refused(admin_client) -> None:
    assert admin_client.post(ADD, schedule_form(interval=60)).status_code == 302
    response = admin_client.post(ADD, schedule_form(interval=60))
    assert "already has a schedule" in response.content.decode()
    assert admin_client.post(ADD, schedule_form(interval=61)).status_code == 302


def test_edit_moves_next_run_and_bumps_revision(admin_client) -> None:
    row = ScheduleFactory(interval=3600)
    Schedule.objects.filter(pk=row.pk).update(last_run=timezone.now() - timedelta(minutes=30))
    row.refresh_from_db()
    revision = row.revision
    form = schedule_form(interval=60, args=row.args, nohaste=True)
    response = admin_client.post(f"{CHANGELIST}{row.pk}/change/", form)
    assert response.status_code == 302
    row.refresh_from_db()
    assert row.revision > revision
    assert row.next_run is not None and row.next_run <= timezone.now() + timedelta(seconds=1)


def test_enable_disable_actions(admin_client) -> None:
    rows = [ScheduleFactory(), ScheduleFactory()]
    ids = [str(r.pk) for r in rows]
    admin_client.post(CHANGELIST, {"action": "disable", "_selected_action": ids})
    assert not Schedule.objects.filter(enabled=True).exists()
    admin_client.post(CHANGELIST, {"action": "enable", "_selected_action": ids})
    assert Schedule.objects.filter(enabled=True).count() == 2
    assert all(r.revision == 3 for r in Schedule.objects.all())


def test_run_now_sends_a_request(admin_client, router: FakeRouter, eventmq_settings) -> None:
    eventmq_settings(BROKER_ADDR=router.addr)
    row = ScheduleFactory(queue="email")
    response = admin_client.post(CHANGELIST, {"action": "run_now", "_selected_action": [row.pk]})
    assert response.status_code == 302
    ((_, message),) = router.wait_for(Request)
    assert isinstance(message, Request)
    assert message.queue == "email" and message.headers.reply_requested
    run = ScheduleRun.objects.get()
    assert run.msgid == message.msgid and run.claimed_by == "admin"
    row.refresh_from_db()
    assert row.total_runs == 1 and row.last_msgid == message.msgid
    page = admin_client.get(CHANGELIST).content.decode()
    assert f"sent (msgid {message.msgid})" in page
    detail = admin_client.get(f"{CHANGELIST}{row.pk}/change/").content.decode()
    assert message.msgid in detail  # recent runs
