"""The JobResult admin (read-only, filters, search, retry) and emq_purge_results."""

from __future__ import annotations

import importlib.util
from datetime import timedelta
from io import StringIO
from urllib.parse import urlencode

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_eventmq.management.commands.emq_purge_results import parse_age
from django_eventmq.models.results import JobResult
from django_eventmq.protocol import parse_job
from django_eventmq.result_recording import record_results
from tests.django.results.conftest import receive_request

pytestmark = pytest.mark.django_db
CHANGELIST = "/admin/django_eventmq/jobresult/"


def make(msgid, status="succeeded", job="tests.django.results.jobs.add", queue="default", **extra):
    record_results(
        [
            {
                "msgid": msgid,
                "queue": queue,
                "job": job,
                "args": [1, 2],
                "kwargs": {},
                "status": status,
                "value": 3,
                "error": None,
                "attempt": 1,
                "jobmanager": "jm",
                "pid": 1,
                "started": None,
                "finished": None,
                **extra,
            }
        ]
    )
    return JobResult.objects.get(msgid=msgid)


def test_changelist_filters_and_search(admin_client):
    make("alpha-1", status="failed", queue="email")
    make("beta-2", status="succeeded", job="tests.django.results.jobs.marker")
    page = admin_client.get(CHANGELIST + "?status__exact=failed").content.decode()
    assert "alpha-1" in page and "beta-2" not in page
    page = admin_client.get(CHANGELIST + "?queue=email").content.decode()
    assert "alpha-1" in page and "beta-2" not in page
    page = admin_client.get(CHANGELIST + "?q=beta-2").content.decode()
    assert "beta-2" in page and "alpha-1" not in page
    page = admin_client.get(CHANGELIST + "?q=jobs.marker").content.decode()
    assert "beta-2" in page and "alpha-1" not in page
    today = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    window = urlencode(
        {"created__gte": today.isoformat(), "created__lt": (today + timedelta(days=1)).isoformat()}
    )
    page = admin_client.get(f"{CHANGELIST}?{window}").content.decode()
    assert "alpha-1" in page and "beta-2" in page


def test_results_are_read_only(admin_client):
    row = make("ro-1")
    assert admin_client.get(CHANGELIST + "add/").status_code == 403
    detail = admin_client.get(f"{CHANGELIST}{row.pk}/change/")
    assert detail.status_code == 200
    page = detail.content.decode()
    assert "ro-1" in page and 'name="_save"' not in page
    admin_client.post(f"{CHANGELIST}{row.pk}/change/", {"status": "failed"})
    assert JobResult.objects.get(pk=row.pk).status == "succeeded"


def test_the_last_progress_shows_in_the_list_and_on_the_page(admin_client):
    make("quiet-1")
    long_progress = {"step": "copying", "done": 7, "of": 10, "note": "x" * 200}
    make("busy-1", status="running", progress={"step": "copying", "done": 7, "of": 10})
    make("long-1", status="running", progress=long_progress)

    listing = admin_client.get(CHANGELIST).content.decode()
    assert "{&quot;step&quot;: &quot;copying&quot;, &quot;done&quot;: 7" in listing
    assert "x" * 200 not in listing  # shortened in the list...
    assert "\u2026" in listing
    row = JobResult.objects.get(msgid="long-1")
    page = admin_client.get(f"{CHANGELIST}{row.pk}/change/").content.decode()
    assert "x" * 200 in page  # ...whole on the row's page
    quiet = JobResult.objects.get(msgid="quiet-1")
    quiet_page = admin_client.get(f"{CHANGELIST}{quiet.pk}/change/").content.decode()
    assert "Last progress" in quiet_page and "<pre>null</pre>" in quiet_page


def retry(admin_client, *rows):
    response = admin_client.post(
        CHANGELIST,
        {"action": "retry", "_selected_action": [row.pk for row in rows]},
        follow=True,
    )
    return response.content.decode()


def test_retry_action_sends_the_job_again(admin_client, broker):
    first = make("retry-1", status="failed")
    assert "Queued 1 job(s) again" in retry(admin_client, first)
    _identity, plain = receive_request(broker)
    assert parse_job(plain.body_text).name == "tests.django.results.jobs.add"
    assert plain.msgid != "retry-1" and plain.headers.reply_requested
    assert list(parse_job(plain.body_text).args) == [1, 2]


@pytest.mark.skipif(
    importlib.util.find_spec("django.tasks") is None, reason="django.tasks is new in Django 6.0"
)
def test_retry_action_sends_a_django_task_through_its_dispatcher(admin_client, broker):
    task_row = make(
        "retry-2",
        status="failed",
        job="django_eventmq.tasks_runner.run_task",
        args=["tests.django.results.tasks.multiply", ["/p", 2, 3], {}, "default", "retry-2"],
    )
    assert "Queued 1 job(s) again" in retry(admin_client, task_row)
    _identity, task = receive_request(broker)
    assert parse_job(task.body_text).name == "django_eventmq.tasks_runner.run_task"
    args = list(parse_job(task.body_text).args)
    assert args[:3] == ["tests.django.results.tasks.multiply", ["/p", 2, 3], {}]
    assert args[4] == task.msgid  # the new run has its own id


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("7d", 7 * 86400), ("12h", 43200), ("30m", 1800), ("45s", 45), ("2", 172800), ("1.5h", 5400)],
)
def test_parse_age(text, seconds):
    assert parse_age(text).total_seconds() == seconds


def _age(msgid, days):
    JobResult.objects.filter(msgid=msgid).update(updated=timezone.now() - timedelta(days=days))


def test_purge_deletes_old_rows_in_chunks():
    for n in range(5):
        make(f"old-{n}")
        _age(f"old-{n}", 10)
    make("young")
    _age("young", 1)
    out = StringIO()
    call_command("emq_purge_results", "--older-than", "7d", "--chunk-size", "2", stdout=out)
    assert list(JobResult.objects.values_list("msgid", flat=True)) == ["young"]
    lines = out.getvalue().splitlines()
    assert lines[:3] == [
        "deleted 2 job results so far",
        "deleted 4 job results so far",
        "deleted 5 job results so far",
    ]
    assert lines[-1].startswith("deleted 5 job results last updated before ")


def test_purge_defaults_to_the_retention_setting(eventmq_settings):
    eventmq_settings(RESULTS_RETENTION_DAYS=0.5)
    make("a-day-old")
    _age("a-day-old", 1)
    make("fresh")
    call_command("emq_purge_results", stdout=StringIO())
    assert list(JobResult.objects.values_list("msgid", flat=True)) == ["fresh"]


def test_purge_deletes_old_finished_workflows_not_running_ones():
    from django_eventmq.models.workflows import Workflow

    now = timezone.now()
    for wid, status, days in [
        ("old-done", "succeeded", 10),
        ("old-failed", "failed", 10),
        ("old-running", "running", 10),
        ("young-done", "succeeded", 1),
    ]:
        when = now - timedelta(days=days)
        Workflow.objects.create(
            workflow_id=wid, kind="chain", status=status, stages=[], created=when, updated=when
        )
    out = StringIO()
    call_command("emq_purge_results", "--older-than", "7d", stdout=out)
    assert sorted(Workflow.objects.values_list("workflow_id", flat=True)) == [
        "old-running",
        "young-done",
    ]
    assert "deleted 2 finished workflows" in out.getvalue()


@pytest.mark.parametrize("args", [["--older-than", "soon"], ["--chunk-size", "0"]])
def test_purge_refuses_bad_options(args):
    with pytest.raises(CommandError):
        call_command("emq_purge_results", *args, stdout=StringIO())
