"""Workflows in the worker: one member run, the next stage sent, failures noted.

Each member runs in a worker as the step runner job (:func:`run_step`, which
the app's ``jobs.py`` registers), which calls the member's job, commits its
value (a :class:`~django_eventmq.models.WorkflowStep` row) and, when that
completes the stage, sends the next stage (msgids derived from the workflow
id and the place, so the router dedups a second send), all before the worker
reports the member done. A member that fails for good (its retries spent)
marks the workflow ``failed`` (:func:`note_outcomes`, called as its result is
recorded); later stages are never sent. With ``EAGER`` the sender runs every
member itself (:func:`run_inline`). The sending side is :mod:`.workflows`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from django_eventmq.client.pool import get_client
from django_eventmq.client.workflows import (
    RUNNER,
    Signature,
    Stages,
    member_call,
    parse_member_msgid,
    send_stage,
    stage_input,
    stages_from_json,
)
from django_eventmq.errors import ConfigurationError, WorkflowCancelled
from django_eventmq.jobmanager import invoke
from django_eventmq.models.workflows import Workflow, WorkflowStatus, WorkflowStep
from django_eventmq.protocol import JobBody
from django_eventmq.protocol.payload import encode_json
from django_eventmq.protocol.status import JobStatus
from django_eventmq.runtime import registry, retry_policy
from django_eventmq.runtime.config import get_settings

#: Results-table statuses that end a member for good (a ``retrying`` one goes on).
FAILED_FOR_GOOD = frozenset(
    {JobStatus.FAILED, JobStatus.TIMED_OUT, JobStatus.CANCELLED, JobStatus.EXPIRED}
)


def run_inline(stages: Stages) -> Any:
    """Run every stage here, in order (``EAGER``): members of a stage one after another."""
    given: Any = None
    for index, members in enumerate(stages):
        values = []
        for member in members:
            args, kwargs = member_call(member, index, given)
            values.append(invoke.call(_resolve(member.name, args, kwargs, None), args, kwargs))
        given = stage_input(values, len(members))
    return given


# -- in the worker: one member --------------------------------------------------------
def _resolve(name: str, args: list[Any], kwargs: dict[str, Any], queue: str | None) -> Any:
    """The member's registered function, as the worker would resolve it (never imported)."""
    path, _, callable_name = name.rpartition(".")
    settings = get_settings()
    body = JobBody(path=path, callable=callable_name, args=tuple(args), kwargs=kwargs)
    return registry.resolve(
        body, settings.allowed_job_modules, queue, settings.queue_allowed_jobs or None
    )


def run_step(name: str, args: list[Any], kwargs: dict[str, Any], place: Mapping[str, Any]) -> Any:
    """Run one member in this worker; send the next stage if this completes the stage.

    The order is what makes a job manager's death harmless: the value is
    committed, then the next stage is sent and stored by the router, and
    only then does this return (and the job manager report the member done).
    Run again after a death, the member commits again (``completions`` + 1)
    and sends the same msgids again, which the router refuses.
    """
    workflow_id, stage = str(place["workflow"]), int(place["stage"])
    member = int(place["member"])
    try:
        row = Workflow.objects.get(workflow_id=workflow_id)
    except Workflow.DoesNotExist:
        raise ConfigurationError(
            f"workflow {workflow_id} has no row in this database: the job managers must "
            "use the database the workflow was sent with"
        ) from None
    if row.status == WorkflowStatus.CANCELLED:
        raise WorkflowCancelled(f"workflow {workflow_id} was cancelled; {name} not run")
    func = _resolve(name, args, kwargs, str(place.get("queue") or "") or None)
    # If the member raises, the worker asks the retry policy of the job it ran, this
    # runner: make that the member's (a worker runs one job at a time).
    retry_policy.register(RUNNER, retry_policy.policy_for(name))
    value = invoke.call(func, args, kwargs)
    encode_json(value)  # a value the next member cannot be given fails this member
    msgid = f"wf-{workflow_id}-{stage}-{member}"
    _commit_step(row, stage, member, msgid, name, value)
    stages = stages_from_json(row.stages)
    values = list(
        WorkflowStep.objects.filter(workflow=row, stage=stage)
        .order_by("member")
        .values_list("value", flat=True)
    )
    if len(values) < len(stages[stage]):
        return value  # another member completes the stage
    given = stage_input(values, len(stages[stage]))
    if stage + 1 == len(stages):
        Workflow.objects.filter(pk=row.pk, status=WorkflowStatus.RUNNING).update(
            status=WorkflowStatus.SUCCEEDED, result=given, updated=timezone.now()
        )
        return value
    _send_next(row, stage + 1, stages[stage + 1], given)
    return value


def _commit_step(row: Workflow, stage: int, member: int, msgid: str, name: str, value: Any) -> None:
    now = timezone.now()
    done = {"job": name, "value": value, "finished": now}
    try:
        with transaction.atomic():
            WorkflowStep.objects.create(
                workflow=row, stage=stage, member=member, msgid=msgid, **done
            )
    except IntegrityError:  # it ran before (redelivered): keep the newest value
        WorkflowStep.objects.filter(msgid=msgid).update(completions=F("completions") + 1, **done)


def _send_next(row: Workflow, stage: int, members: Sequence[Signature], given: Any) -> None:
    """Send the next stage unless cancelled; cancel it again if a cancel came meanwhile."""
    if _status(row) != WorkflowStatus.RUNNING:
        return  # cancelled (or failed): it is never sent
    settings = get_settings()
    if settings.run_inline:
        raise ConfigurationError(
            "workflow members send the next stage to the router: the job manager's "
            "workers need BROKER_ADDR (the router's frontend) and EAGER off"
        )
    client = get_client(settings.broker_addr, send_timeout=settings.send_timeout)
    sent = send_stage(
        client,
        row.workflow_id,
        stage,
        members,
        given,
        ack_timeout=settings.ack_timeout,
        retries=settings.ack_retries,
    )
    Workflow.objects.filter(pk=row.pk, stage__lt=stage).update(stage=stage, updated=timezone.now())
    if _status(row) == WorkflowStatus.CANCELLED:
        # The cancel read the row before we sent: its CANCELs may have missed these.
        for msgid in sent:
            client.cancel(msgid)


def _status(row: Workflow) -> str:
    found = Workflow.objects.filter(pk=row.pk).values_list("status", flat=True).first()
    return str(found or "")


# -- as results are recorded ----------------------------------------------------------
def note_outcomes(rows: Iterable[Mapping[str, Any]]) -> int:
    """Mark failed the running workflows whose member failed for good in ``rows``.

    ``rows`` are results-table rows as :func:`django_eventmq.result_recording.record_results`
    writes them (``msgid``, ``status``, ``exc_type``, ``exc_message``); it calls
    this after each batch. Job managers write ``failed`` only once a member's
    retries are spent (``retrying`` before). Returns how many workflows it marked.
    """
    marked = 0
    for row in rows:
        msgid, status = row.get("msgid"), row.get("status")
        if status not in FAILED_FOR_GOOD or not isinstance(msgid, str):
            continue
        place = parse_member_msgid(msgid)
        if place is None:
            continue
        marked += Workflow.objects.filter(
            workflow_id=place[0], status=WorkflowStatus.RUNNING
        ).update(
            status=WorkflowStatus.FAILED,
            failed_msgid=msgid,
            exc_type=str(row.get("exc_type") or status),
            exc_message=str(row.get("exc_message") or status),
            updated=timezone.now(),
        )
    return marked
