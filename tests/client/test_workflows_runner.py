"""The step runner in this process (as a worker runs it), against a raw ROUTER in a thread
that ACKs REQUESTs and keeps every REQUEST and CANCEL: what a member sends, and when."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from django_eventmq.client.workflows import RUNNER, Stages, member_msgid, stages_to_json
from django_eventmq.errors import JobNotAllowed, WorkflowCancelled
from django_eventmq.models import Workflow, WorkflowStep
from django_eventmq.protocol import Message, Request, parse_job
from django_eventmq.runtime import retry_policy
from django_eventmq.workflow_steps import run_step
from django_eventmq.workflows import chain
from tests.django.results.conftest import ThreadRouter, ack
from tests.django.results.conftest import thread_router as thread_router  # a fixture
from tests.support import wait_for
from tests.system.e2e import workflow_jobs as wj

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def router(thread_router: Callable[..., ThreadRouter]) -> Callable[..., ThreadRouter]:
    """``router(on_request)``: a router thread that ACKs each REQUEST after
    ``on_request(request)`` and keeps REQUESTs and CANCELs."""

    def start(on_request: Callable[[Request], None] = lambda request: None) -> ThreadRouter:
        def answer(request: Request, _count: int) -> list[Message]:
            on_request(request)
            return [ack(request)]

        return thread_router(answer, ACK_TIMEOUT=5)

    return start


def _workflow(stages: Stages, workflow_id: str = "a" * 32) -> Workflow:
    now = timezone.now()
    return Workflow.objects.create(
        workflow_id=workflow_id,
        kind="chain",
        stages=stages_to_json(stages),
        created=now,
        updated=now,
    )


def _place(row: Workflow, stage: int, member: int = 0) -> dict[str, Any]:
    return {"workflow": row.workflow_id, "stage": stage, "member": member, "queue": "default"}


def test_a_member_commits_its_value_then_sends_the_next_stage(router: Any) -> None:
    got = router()
    row = _workflow(((wj.add.s(1, 2),), (wj.double.s(), wj.add.s(10))))
    assert run_step(wj.add.name, [1, 2], {}, _place(row, 0)) == 3
    # Stored by the router before run_step returned (the ACKs came first).
    sent = got.requests()
    assert [r.msgid for r in sent] == [member_msgid(row.workflow_id, 1, i) for i in (0, 1)]
    assert [list(parse_job(r.body_text).args[:2]) for r in sent] == [
        [wj.double.name, [3]],
        [wj.add.name, [3, 10]],
    ]
    assert all(r.headers.reply_requested for r in sent)
    step = WorkflowStep.objects.get()
    assert (step.stage, step.value, step.completions) == (0, 3, 1)
    assert Workflow.objects.get(pk=row.pk).stage == 1


def test_a_member_run_again_commits_again_and_resends_the_same_msgids(router: Any) -> None:
    got = router()
    row = _workflow(((wj.add.s(1, 2),), (wj.double.s(),)))
    run_step(wj.add.name, [1, 2], {}, _place(row, 0))
    run_step(wj.add.name, [1, 2], {}, _place(row, 0))  # redelivered after a death
    assert [r.msgid for r in got.requests()] == [member_msgid(row.workflow_id, 1, 0)] * 2
    assert WorkflowStep.objects.get().completions == 2


def test_the_stage_is_passed_on_by_the_member_that_completes_it(router: Any) -> None:
    got = router()
    row = _workflow(((wj.add.s(1, 1), wj.add.s(2, 2)), (wj.total.s(),)))
    run_step(wj.add.name, [2, 2], {}, _place(row, 0, 1))
    assert got.requests() == []  # member 0 has not finished
    run_step(wj.add.name, [1, 1], {}, _place(row, 0, 0))
    (callback,) = got.requests()
    assert parse_job(callback.body_text).args[1] == [[2, 4]]  # in member order


def test_the_last_stage_completes_the_workflow(router: Any) -> None:
    router()
    row = _workflow(((wj.add.s(1, 1), wj.add.s(2, 2)),))
    run_step(wj.add.name, [1, 1], {}, _place(row, 0, 0))
    assert Workflow.objects.get(pk=row.pk).status == "running"
    run_step(wj.add.name, [2, 2], {}, _place(row, 0, 1))
    done = Workflow.objects.get(pk=row.pk)
    assert (done.status, done.result) == ("succeeded", [2, 4])


def test_a_member_of_a_cancelled_workflow_does_not_run(router: Any, tmp_path: Path) -> None:
    got = router()
    row = _workflow(((wj.add.s(1, 2),), (wj.double.s(),)))
    Workflow.objects.filter(pk=row.pk).update(status="cancelled")
    log = tmp_path / "ran"
    with pytest.raises(WorkflowCancelled):
        run_step(wj.add.name, [1, 2], {"log": str(log)}, _place(row, 0))
    assert not log.exists() and got.requests() == []


def test_a_cancel_while_the_next_stage_is_sent_cancels_what_was_sent(router: Any) -> None:
    row = _workflow(((wj.add.s(1, 2),), (wj.double.s(), wj.double.s())))

    def cancel_meanwhile(request: Request) -> None:
        # The cancel marks the row after the member's first read, before its second.
        Workflow.objects.filter(pk=row.pk).update(status="cancelled")

    got = router(cancel_meanwhile)
    run_step(wj.add.name, [1, 2], {}, _place(row, 0))
    sent = [r.msgid for r in got.requests()]
    assert len(sent) == 2
    wait_for(lambda: got.cancels() == sent, 10, "the member to cancel what it sent")


def test_a_failing_members_retry_policy_is_the_one_its_worker_reads(router: Any) -> None:
    router()
    row = _workflow(((wj.picky.s(1),),))
    with pytest.raises(ValueError, match="picky at 1") as raised:
        run_step(wj.picky.name, [1], {}, _place(row, 0))
    # The worker asks the policy of the job it ran (the runner): the member's retry_on.
    assert retry_policy.advice(RUNNER, raised.value, 0.0) == {"allowed": False}
    run_step(wj.add.name, [1, 2], {}, _place(_workflow(((wj.add.s(1, 2),),), "b" * 32), 0))
    assert retry_policy.policy_for(RUNNER) is None  # a member without a policy: none


def test_a_member_not_allowed_on_its_queue_is_refused(router: Any, eventmq_settings: Any) -> None:
    got = router()
    eventmq_settings(
        BROKER_ADDR=got.address,
        QUEUE_ALLOWED_JOBS={"default": [wj.add.name, "django_eventmq.jobs.*"]},
    )
    row = _workflow(((wj.add.s(1, 2),), (wj.double.s(),)))
    assert run_step(wj.add.name, [1, 2], {}, _place(row, 0)) == 3
    with pytest.raises(JobNotAllowed, match="not allowed on queue 'default'"):
        run_step(wj.double.name, [3], {}, _place(row, 1))


def test_a_workflow_sent_in_a_transaction_starts_when_it_commits(router: Any) -> None:
    got = router()
    with transaction.atomic():
        handle = chain(wj.add.s(1, 2), wj.double.s()).delay()
        assert Workflow.objects.filter(workflow_id=handle).exists()
        assert got.requests() == []  # a worker could not read the row yet
    wait_for(lambda: len(got.requests()) == 1, 10, "the first member, once committed")
    assert got.requests()[0].msgid == member_msgid(handle, 0, 0)


def test_a_workflow_sent_in_a_transaction_rolled_back_is_never_sent(router: Any) -> None:
    got = router()
    with pytest.raises(RuntimeError), transaction.atomic():
        handle = chain(wj.add.s(1, 2), wj.double.s()).delay()
        raise RuntimeError("rolled back")
    assert not Workflow.objects.filter(workflow_id=handle).exists()
    chain(wj.add.s(5, 5)).delay()  # sent at once: the one before it was not
    wait_for(lambda: got.requests(), 10, "the second workflow's member")
    assert [r.msgid.split("-")[1] for r in got.requests()] != [handle]
    assert len(got.requests()) == 1
