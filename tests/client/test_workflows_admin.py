"""The Workflow admin: the list filtered by status, a workflow's page with its members
linked to their results rows, and the cancel action (a raw ROUTER plays the router)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.utils import timezone

from django_eventmq.client.workflows import member_msgid, stages_to_json
from django_eventmq.models import JobResult, Workflow
from django_eventmq.protocol import Cancel, Features
from django_eventmq.result_recording import record_results
from django_eventmq.runtime import transport
from tests.django.results.conftest import raw_broker
from tests.support import result_record
from tests.system.e2e import workflow_jobs as wj

pytestmark = pytest.mark.django_db
CHANGELIST = "/admin/django_eventmq/workflow/"


def _workflow(workflow_id: str, status: str = "running", stage: int = 0) -> Workflow:
    now = timezone.now()
    stages = stages_to_json(((wj.add.s(1, 2),), (wj.double.s(), wj.double.s())))
    return Workflow.objects.create(
        workflow_id=workflow_id,
        kind="chain",
        status=status,
        stages=stages,
        stage=stage,
        created=now,
        updated=now,
    )


@pytest.fixture
def broker(eventmq_settings: Any) -> Iterator[transport.Channel]:
    with raw_broker(eventmq_settings) as channel:
        yield channel


def test_the_list_filters_by_status(admin_client: Any) -> None:
    _workflow("a" * 32, status="failed")
    _workflow("b" * 32, status="succeeded")
    page = admin_client.get(CHANGELIST + "?status__exact=failed").content.decode()
    assert "a" * 32 in page and "b" * 32 not in page


def test_a_workflows_page_links_each_member_to_its_results_row(admin_client: Any) -> None:
    row = _workflow("c" * 32, stage=1)
    first = member_msgid(row.workflow_id, 0, 0)
    record_results([result_record(first, "succeeded", job="tests.x.add", args=[1, 2])])
    result = JobResult.objects.get(msgid=first)
    page = admin_client.get(f"{CHANGELIST}{row.pk}/change/").content.decode()
    assert f'/admin/django_eventmq/jobresult/{result.pk}/change/">{first}</a>' in page
    assert page.count("tests.system.e2e.workflow_jobs.double") == 2
    assert page.count("<td>-</td>") == 2  # stage 1 was sent, its rows are not written yet


def test_the_cancel_action_cancels_every_member_at_the_router(
    admin_client: Any, broker: transport.Channel
) -> None:
    row = _workflow("d" * 32)
    done = _workflow("e" * 32, status="succeeded")
    response = admin_client.post(
        CHANGELIST,
        {"action": "cancel", "_selected_action": [row.pk, done.pk]},
        follow=True,
    )
    assert "Cancelled 1 workflow(s)." in response.content.decode()
    assert Workflow.objects.get(pk=row.pk).status == "cancelled"
    assert Workflow.objects.get(pk=done.pk).status == "succeeded"
    cancelled = []
    while len(cancelled) < 3:
        assert broker.poll(10_000), f"only {cancelled} cancelled"
        _identity, _frames, message = broker.recv()
        if isinstance(message, Features):
            continue
        assert isinstance(message, Cancel)
        cancelled.append(message.job_msgid)
    assert cancelled == [member_msgid(row.workflow_id, s, m) for s, m in ((0, 0), (1, 0), (1, 1))]
