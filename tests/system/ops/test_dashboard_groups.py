"""The admin dashboard reading several routers (``STATUS_ADMIN_ADDRS``), through Django's
test client: one live router and one that does not answer, in one shard or in two."""

from __future__ import annotations

import re

import pytest
from django.urls import NoReverseMatch, reverse

from django_eventmq.runtime import config
from tests.support import free_port, wait_for
from tests.system.ops.test_dashboard import DATA, PAGE, _fresh_samples  # noqa: F401 - autouse

pytestmark = pytest.mark.django_db


@pytest.fixture
def nowhere() -> str:
    return f"tcp://127.0.0.1:{free_port()}"


def test_two_shards_one_unreachable_is_a_row_not_an_error_page(
    admin_client, site, nowhere, eventmq_settings
):
    eventmq_settings(STATUS_ADMIN_ADDRS=f"{site.admin};{nowhere}")
    response = admin_client.get(reverse(DATA))
    assert response.status_code == 200
    data = response.json()
    assert [(r["shard"], r["address"], r["role"]) for r in data["routers"]] == [
        (1, site.admin, "leader"),
        (2, nowhere, "unreachable"),
    ]
    assert data["routers"][1]["error"].startswith("router unreachable: no answer to STATUS")
    assert [(s["shard"], s["leader"]) for s in data["shards"]] == [(1, site.admin), (2, None)]
    assert data["shards"][1]["error"] == "shard 2: no member answered"
    assert {q["queue"] for q in data["shards"][0]["queues"]} >= {"email", "default"}
    # The tiles and charts add up the leaders: shard 1's numbers here.
    assert data["router"]["reachable"] is False
    assert data["workers_alive"] == 1
    assert data["router"]["job_managers"][0]["shard"] == 1


def test_the_page_has_the_router_table_only_with_several_routers(
    admin_client, site, nowhere, eventmq_settings
):
    eventmq_settings(ADMIN_ADDR=site.admin)
    html = admin_client.get(reverse(PAGE)).content.decode()
    assert 'id="emq-routers"' not in html  # one router: the page as before
    eventmq_settings(ADMIN_ADDR=site.admin, STATUS_ADMIN_ADDRS=f"{site.admin},{nowhere}")
    html = admin_client.get(reverse(PAGE)).content.decode()
    assert 'id="emq-routers"' in html
    # One URL to poll: the router table is drawn by dashboard.js from the data view.
    assert re.findall(r'data-url="([^"]*)"', html) == ["/admin/django_eventmq/dashboard/data/"]
    assert "<script>" not in html


def test_samples_and_throughput_with_several_routers(admin_client, site, nowhere, eventmq_settings):
    eventmq_settings(STATUS_ADMIN_ADDRS=f"{site.admin},{nowhere}")
    first = admin_client.get(reverse(DATA)).json()
    assert first["router"]["reachable"] is True  # the shard's leader answered
    site.send("email", "noop", 1)
    data = wait_for(
        lambda: (d := admin_client.get(reverse(DATA)).json())["samples"] and d,
        30,
        "a chart sample",
        poll=0.2,
    )
    assert "email" in data["samples"][-1]["waiting"]
    assert data["router"]["totals"]["jobs_per_s"] is not None


def test_a_bad_list_reads_as_unreachable_with_the_reason(admin_client, settings):
    settings.EVENTMQ = {"STATUS_ADMIN_ADDRS": "tcp://127.0.0.1:1;"}
    config.reset()
    response = admin_client.get(reverse(DATA))
    assert response.status_code == 200
    data = response.json()
    assert data["router"]["reachable"] is False
    assert data["router"]["error"].startswith("STATUS_ADMIN_ADDRS: group 2 of ")
    assert data["routers"] == []
    assert admin_client.get(reverse(PAGE)).status_code == 200


def test_there_is_no_separate_router_table_endpoint(admin_client, site, nowhere, eventmq_settings):
    eventmq_settings(STATUS_ADMIN_ADDRS=f"{site.admin},{nowhere}")
    with pytest.raises(NoReverseMatch):
        reverse("admin:django_eventmq_dashboard_routers")
    response = admin_client.get("/admin/django_eventmq/dashboard/routers/")
    assert response.status_code == 404
