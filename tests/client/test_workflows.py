"""Workflows without processes: signatures, plans, member msgids and bodies, EAGER runs,
a failed member's row failing its workflow, and the runner's records naming the member."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from django_eventmq import chain, chord, group
from django_eventmq.client.workflows import (
    RUNNER,
    member_body,
    member_msgid,
    parse_member_msgid,
    stages_from_json,
    stages_to_json,
)
from django_eventmq.errors import ConfigurationError, JobError, SerializationError
from django_eventmq.models import Workflow
from django_eventmq.protocol import parse_job
from django_eventmq.result_recording import normalise, record_results
from django_eventmq.workflow_steps import note_outcomes
from django_eventmq.workflows import WorkflowHandle
from tests.support import result_record
from tests.system.e2e import workflow_jobs as wj


def test_a_signature_copies_its_arguments_and_is_immutable() -> None:
    items = [1, 2]
    sig = wj.total.s(items, log=None)
    items.append(3)
    assert sig.args == ([1, 2],)
    assert sig.name == "tests.system.e2e.workflow_jobs.total"
    assert repr(sig) == "tests.system.e2e.workflow_jobs.total.s([1, 2], log=None)"
    with pytest.raises(AttributeError):
        sig.args = ()  # type: ignore[misc]
    moved = sig.set(queue="other", retry_count=2)
    assert (moved.queue, moved.parsed_headers().retry_count) == ("other", 2)
    assert (sig.queue, sig.parsed_headers().retry_count) == ("default", 0)
    with pytest.raises(ConfigurationError, match=r"total\.s\(\.\.\.\)\.set\(\)"):
        sig.set(retry_count=-1)
    with pytest.raises(ConfigurationError, match="set"):
        sig.set(no_such_header=1)


def test_a_signature_refuses_arguments_that_are_not_json() -> None:
    with pytest.raises(SerializationError, match=r"add\.s\(\) arguments"):
        wj.add.s(object(), 1)


def test_signatures_round_trip_through_json() -> None:
    stages = ((wj.add.s(1, 2).set(timeout=30),), (wj.double.s(), wj.double.s(log="x")))
    assert stages_from_json(stages_to_json(stages)) == stages


def test_plans_of_chain_group_and_chord() -> None:
    a, b, c = wj.add.s(1, 2), wj.double.s(), wj.total.s()
    assert chain(a, b, c).stages == ((a,), (b,), (c,))
    assert group(a, b).stages == ((a, b),)
    assert group(x for x in (a, b)).stages == ((a, b),)
    assert chord(group(a, b), c).stages == ((a, b), (c,))
    assert chord([a, b], c).stages == ((a, b), (c,))
    assert chain(a, group(b, b), c).stages == ((a,), (b, b), (c,))
    with pytest.raises(ConfigurationError, match="at least one"):
        chain()
    with pytest.raises(ConfigurationError, match="signatures"):
        group(chain(a))
    with pytest.raises(ConfigurationError, match="signatures"):
        chain(wj.add)  # type: ignore[arg-type]


def test_member_msgids_are_derived_from_the_place() -> None:
    wid = "0" * 31 + "a"
    assert member_msgid(wid, 2, 3) == f"wf-{wid}-2-3"
    assert parse_member_msgid(f"wf-{wid}-2-3") == (wid, 2, 3)
    assert parse_member_msgid("wf-xyz-1-1") is None
    assert parse_member_msgid("abc-1") is None


def test_a_member_body_runs_the_runner_with_the_input_first() -> None:
    body = parse_job(member_body("f" * 32, 1, 0, wj.add.s(5, log="l"), 7))
    assert body.name == RUNNER
    name, args, kwargs, place = body.args
    assert (name, args, kwargs) == ("tests.system.e2e.workflow_jobs.add", [7, 5], {"log": "l"})
    assert place == {"workflow": "f" * 32, "stage": 1, "member": 0, "queue": "default"}
    first = parse_job(member_body("f" * 32, 0, 0, wj.add.s(5, 6), None))
    assert first.args[1] == [5, 6]  # the first stage gets no input


def test_an_input_that_is_not_json_is_refused() -> None:
    with pytest.raises(SerializationError, match="input of"):
        member_body("f" * 32, 1, 0, wj.double.s(), object())


def test_the_runners_records_name_the_member() -> None:
    record = result_record(
        "wf-" + "a" * 32 + "-0-0", "succeeded", job=RUNNER, args=["m.add", [1, 2], {"k": 1}, {}]
    )
    row = normalise(record, timezone.now())
    assert row is not None
    assert (row["job"], row["args"], row["kwargs"]) == ("m.add", [1, 2], {"k": 1})


def test_eager_workflows_run_inline(eventmq_settings: Any) -> None:
    eventmq_settings(EAGER=True)
    assert chain(wj.add.s(1, 2), wj.double.s(), wj.double.s()).delay().wait() == 12
    assert group(wj.add.s(i, i) for i in range(5)).delay().wait() == [0, 2, 4, 6, 8]
    handle = chord(group(wj.add.s(1, 1), wj.add.s(2, 2)), wj.total.s()).delay()
    assert (handle.wait(), handle.status) == (6, "succeeded")


@pytest.mark.django_db
def test_a_member_failed_for_good_fails_its_workflow_a_retrying_one_does_not() -> None:
    wid = "b" * 32
    now = timezone.now()
    Workflow.objects.create(workflow_id=wid, kind="chain", stages=[], created=now, updated=now)
    msgid = member_msgid(wid, 1, 0)
    error = {"type": "ValueError", "message": "boom", "traceback": ""}
    record_results([result_record(msgid, "retrying", job=RUNNER, args=[], error=error)])
    assert Workflow.objects.get(workflow_id=wid).status == "running"
    record_results([result_record(msgid, "failed", job=RUNNER, args=[], attempt=2, error=error)])
    row = Workflow.objects.get(workflow_id=wid)
    assert (row.status, row.failed_msgid, row.exc_type) == ("failed", msgid, "ValueError")
    with pytest.raises(JobError, match=r"ValueError: workflow \w+ failed at member \S+: boom"):
        WorkflowHandle(wid).wait(timeout=1)
    # Already over: a later failure changes nothing.
    assert note_outcomes([{"msgid": msgid, "status": "failed"}]) == 0
