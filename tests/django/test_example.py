"""The example project's shop: views queue jobs, jobs write rows, the demo command queues."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core.management import call_command
from django.urls import reverse

from django_eventmq.protocol import Request, parse_job
from django_eventmq.runtime import registry, transport
from example_project.shop import jobs
from example_project.shop.models import Report, SentEmail
from tests.django.results.conftest import raw_broker
from tests.support import receive_request

pytestmark = pytest.mark.urls("example_project.urls")


@pytest.fixture
def broker(eventmq_settings) -> Iterator[transport.Channel]:
    """A raw ROUTER on a random loopback port, configured as BROKER_ADDR."""
    with raw_broker(eventmq_settings) as channel:
        yield channel


def receive(channel: transport.Channel) -> Request:
    return receive_request(channel)[1]  # type: ignore[no-any-return]


def test_jobs_modules_are_discovered_and_registered():
    names = registry.registered_names()
    assert "example_project.shop.jobs.send_welcome" in names
    assert "example_project.shop.jobs.build_report" in names


@pytest.mark.django_db
def test_send_welcome_records_an_email():
    pk = jobs.send_welcome("ann@example.com")
    sent = SentEmail.objects.get(pk=pk)
    assert (sent.to, sent.subject) == ("ann@example.com", jobs.WELCOME_SUBJECT)
    assert sent.sent_at is not None


@pytest.mark.django_db
def test_build_report_creates_a_report():
    jobs.send_welcome("ann@example.com")
    report = Report.objects.get(pk=jobs.build_report("weekly"))
    assert (report.name, report.rows) == ("weekly", 1)


@pytest.mark.django_db
def test_index_page_shows_both_forms(client):
    response = client.get(reverse("shop:index"))
    assert response.status_code == 200
    assert b'name="email"' in response.content
    assert b'action="/report/"' in response.content


@pytest.mark.django_db
def test_signup_view_queues_send_welcome(client, broker):
    response = client.post(reverse("shop:signup"), {"email": "bob@example.com"})
    assert response.status_code == 302
    assert response["Location"] == reverse("shop:status")
    message = receive(broker)
    assert message.queue == "email"
    body = parse_job(message.body_text)
    assert (body.path, body.callable, body.args) == (
        "example_project.shop.jobs",
        "send_welcome",
        ("bob@example.com",),
    )
    assert not SentEmail.objects.exists()  # queued, not run here
    page = client.get(response["Location"])
    assert f"job {message.msgid}" in page.content.decode()


@pytest.mark.django_db
def test_report_view_queues_build_report(client, broker):
    response = client.post(reverse("shop:report"), {"name": "daily-sales"})
    assert response.status_code == 302
    message = receive(broker)
    assert message.queue == "reports"
    body = parse_job(message.body_text)
    assert (body.callable, body.args) == ("build_report", ("daily-sales",))


@pytest.mark.django_db
def test_invalid_signup_queues_nothing(client, broker):
    response = client.post(reverse("shop:signup"), {"email": "not-an-address"})
    assert response.status_code == 400
    assert b"errorlist" in response.content
    # Nothing was queued: the next message the broker sees is the report.
    client.post(reverse("shop:report"), {"name": "after"})
    assert parse_job(receive(broker).body_text).callable == "build_report"


@pytest.mark.django_db
def test_views_in_eager_mode_write_rows(client, eventmq_settings):
    eventmq_settings(EAGER=True)
    client.post(reverse("shop:signup"), {"email": "eve@example.com"})
    client.post(reverse("shop:report"), {"name": "eager"})
    assert SentEmail.objects.filter(to="eve@example.com").exists()
    assert Report.objects.filter(name="eager").exists()


@pytest.mark.django_db
def test_status_page_lists_rows(client):
    SentEmail.objects.create(to="ann@example.com", subject="Hi")
    Report.objects.create(name="monthly", rows=12)
    page = client.get(reverse("shop:status")).content.decode()
    assert "ann@example.com" in page
    assert "monthly" in page


def test_enqueue_samples_queues_count_jobs_of_each_kind(broker, capsys):
    call_command("enqueue_samples", count=2)
    got = sorted(
        (m.queue, parse_job(m.body_text).args[0]) for m in (receive(broker) for _ in range(4))
    )
    assert got == [
        ("email", "customer0@example.com"),
        ("email", "customer1@example.com"),
        ("reports", "sample-report-0"),
        ("reports", "sample-report-1"),
    ]
    assert "Queued 2 welcome e-mails and 2 reports." in capsys.readouterr().out
