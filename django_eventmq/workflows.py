"""Workflows: ``chain``, ``group`` and ``chord`` of ``@job`` signatures (``job.s(...)``).

::

    from django_eventmq import chain, chord, group

    handle = chain(fetch.s(url), parse.s(), store.s()).delay()
    handle.wait(timeout=60)             # store's result
    group(resize.s(p) for p in paths).delay().wait()     # [each result]
    chord(group(count.s(f) for f in files), total.s()).delay().wait()

The plan is written to the :class:`~django_eventmq.models.Workflow` row when
the workflow is sent; then the first stage is sent. Each member runs in a
worker as the step runner job (:func:`run_step`), which calls the member's
job, commits its value (a :class:`~django_eventmq.models.WorkflowStep` row)
and, when that completes the stage, sends the next stage (msgids derived from
the workflow id and the place, so the router dedups a second send), all
before the worker reports the member done. A member that fails for good (its
retries spent) marks the workflow ``failed`` (:func:`note_outcomes`, called
as its result is recorded); later stages are never sent. See docs/workflows.md
for the races and why each is safe.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from django_eventmq.client import handles
from django_eventmq.client.connection import get_client
from django_eventmq.client.jobs import send_at_commit
from django_eventmq.client.workflows import (
    RUNNER,
    Signature,
    Stages,
    all_member_msgids,
    member_call,
    parse_member_msgid,
    send_stage,
    stage_input,
    stages_from_json,
    stages_to_json,
)
from django_eventmq.errors import ConfigurationError, EventMQError, JobError, ResultTimeout
from django_eventmq.jobmanager import invoke
from django_eventmq.models.workflows import Workflow, WorkflowStatus, WorkflowStep
from django_eventmq.protocol import JobBody
from django_eventmq.protocol.payload import encode_json
from django_eventmq.protocol.status import JobStatus
from django_eventmq.runtime import registry, retry_policy
from django_eventmq.runtime.config import get_settings

__all__ = [
    "Chain",
    "Chord",
    "Group",
    "Signature",
    "WorkflowCancelled",
    "WorkflowHandle",
    "chain",
    "chord",
    "group",
]

#: Results-table statuses that end a member for good (a ``retrying`` one goes on).
FAILED_FOR_GOOD = frozenset(
    {JobStatus.FAILED, JobStatus.TIMED_OUT, JobStatus.CANCELLED, JobStatus.EXPIRED}
)
_OVER = (WorkflowStatus.SUCCEEDED, WorkflowStatus.FAILED, WorkflowStatus.CANCELLED)


class WorkflowCancelled(EventMQError):
    """The workflow was cancelled (``handle.cancel()``): its remaining members never run."""


class _Plan:
    """What chain, group and chord share: the stages, and sending them."""

    kind = ""

    def __init__(self, stages: Stages) -> None:
        if not stages or not all(stages):
            raise ConfigurationError(f"{self.kind}() needs at least one signature (job.s(...))")
        self.stages = stages

    def delay(self) -> WorkflowHandle:
        """Send the workflow: its row is written, then its first stage is sent."""
        return self.send()

    def send(self) -> WorkflowHandle:
        """Send the workflow (as :meth:`delay`); with ``EAGER`` it runs here, now.

        Returns once the router has stored every member of the first stage
        (:class:`BrokerUnavailable` otherwise; the row then says ``failed``).
        Inside a database transaction the row is written in it and the first
        stage is sent when it commits (workers could not read the row
        before); nothing is sent if it rolls back.
        """
        settings = get_settings()
        workflow_id = uuid.uuid4().hex
        if settings.run_inline:
            return EagerWorkflowHandle.ran(workflow_id, run_inline(self.stages))
        now = timezone.now()
        row = Workflow.objects.create(
            workflow_id=workflow_id,
            kind=self.kind,
            stages=stages_to_json(self.stages),
            created=now,
            updated=now,
        )
        # At once outside a transaction (errors raise here), else at its commit.
        send_at_commit(
            transaction.on_commit,
            lambda: self._send_first(row),
            f"the first stage of workflow {workflow_id}",
            "its row says FAILED",
        )
        return WorkflowHandle(workflow_id)

    def _send_first(self, row: Workflow) -> None:
        settings = get_settings()
        try:
            send_stage(
                get_client(settings.broker_addr, send_timeout=settings.send_timeout),
                row.workflow_id,
                0,
                self.stages[0],
                None,
                ack_timeout=settings.ack_timeout,
                retries=settings.ack_retries,
            )
        except EventMQError as exc:
            Workflow.objects.filter(pk=row.pk, status=WorkflowStatus.RUNNING).update(
                status=WorkflowStatus.FAILED,
                exc_type=type(exc).__name__,
                exc_message=f"the first stage was not sent: {exc}",
                updated=timezone.now(),
            )
            raise

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {list(self.stages)!r}>"


def _stages_of(item: Signature | _Plan) -> Stages:
    if isinstance(item, Signature):
        return ((item,),)
    if isinstance(item, _Plan):
        return item.stages
    raise ConfigurationError(
        f"workflows take signatures (job.s(...)), groups, chains and chords, got {item!r}"
    )


class Chain(_Plan):
    """Members one after another; each one's result is the next one's first argument."""

    kind = "chain"

    def __init__(self, *items: Signature | _Plan) -> None:
        super().__init__(tuple(stage for item in items for stage in _stages_of(item)))


class Group(_Plan):
    """Members in parallel; the result is the list of their results, in order."""

    kind = "group"

    def __init__(self, *items: Signature | Iterable[Signature]) -> None:
        members: list[Signature] = []
        for item in items:
            if isinstance(item, Signature):
                members.append(item)
            elif isinstance(item, _Plan):
                raise ConfigurationError(
                    "group() takes signatures (job.s(...)), not a chain, group or chord"
                )
            else:
                members.extend(_signatures(item))
        super().__init__((tuple(members),))


def _signatures(items: Iterable[Any]) -> list[Signature]:
    found = list(items)
    for item in found:
        if not isinstance(item, Signature):
            raise ConfigurationError(f"group() takes signatures (job.s(...)), got {item!r}")
    return found


class Chord(_Plan):
    """A group, then a callback that gets the list of the group's results."""

    kind = "chord"

    def __init__(self, header: Group | Iterable[Signature], callback: Signature) -> None:
        members = header if isinstance(header, Group) else Group(header)
        if not isinstance(callback, Signature):
            raise ConfigurationError(
                f"chord()'s callback is a signature (job.s(...)), got {callback!r}"
            )
        super().__init__((*members.stages, (callback,)))


def chain(*items: Signature | Chain | Group | Chord) -> Chain:
    """``chain(a.s(1), b.s(), c.s())``: a(1), then b(a's result), then c(b's result)."""
    return Chain(*items)


def group(*items: Signature | Iterable[Signature]) -> Group:
    """``group(a.s(1), a.s(2))`` or ``group(a.s(i) for i in ...)``: all at once."""
    return Group(*items)


def chord(header: Group | Iterable[Signature], callback: Signature) -> Chord:
    """``chord(group(...), cb.s())``: cb gets the list of the group's results."""
    return Chord(header, callback)


# -- handles ---------------------------------------------------------------------------
class WorkflowHandle(str):
    """A sent workflow's id, with ways to wait for it, read it and cancel it.

    ``WorkflowHandle(workflow_id)`` works in any process with the database.
    """

    __slots__ = ()

    @property
    def workflow_id(self) -> str:
        return str(self)

    def _row(self) -> Workflow:
        try:
            return Workflow.objects.get(workflow_id=str(self))
        except Workflow.DoesNotExist:
            raise ConfigurationError(f"no workflow {self} in the database") from None

    @property
    def status(self) -> str:
        """``running``, ``succeeded``, ``failed`` or ``cancelled``."""
        return self._row().status

    def wait(self, timeout: float | None = None, poll: float = 0.05) -> Any:
        """The final result: the last member's (chain, chord) or the list of results (group).

        Reads the workflow's row until it is over. Raises :class:`JobError`
        (the failed member's exception class and message) when a member
        failed for good, :class:`WorkflowCancelled` when it was cancelled,
        :class:`ResultTimeout` after ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = poll
        while True:
            row = self._row()
            if row.status in _OVER:
                return _outcome(row)
            if deadline is not None and time.monotonic() >= deadline:
                raise ResultTimeout(f"workflow {self} not over within {timeout}s")
            time.sleep(pause if deadline is None else min(pause, deadline - time.monotonic()))
            pause = min(pause * 1.5, 0.25)

    @property
    def result(self) -> Any:
        """The final result if over (raises as :meth:`wait` does), else ResultNotReady."""
        row = self._row()
        if row.status not in _OVER:
            raise handles.ResultNotReady(f"workflow {self} is {row.status}")
        return _outcome(row)

    def cancel(self) -> None:
        """Cancel the workflow: no stage not sent yet ever is; queued or running members stop.

        The row says ``cancelled`` first (durably), then every member's msgid
        is cancelled at the router (those not sent yet are unknown there;
        the member that would send them reads the row and does not, or cancels
        what it just sent if it read the row before this; see docs/workflows.md).
        A workflow already over is left as it is.
        """
        row = self._row()
        changed = Workflow.objects.filter(pk=row.pk, status=WorkflowStatus.RUNNING).update(
            status=WorkflowStatus.CANCELLED, updated=timezone.now()
        )
        if not changed:
            return
        settings = get_settings()
        client = get_client(settings.broker_addr, send_timeout=settings.send_timeout)
        for msgid in all_member_msgids(row.workflow_id, stages_from_json(row.stages)):
            client.cancel(msgid)

    def __repr__(self) -> str:
        return f"<WorkflowHandle {str(self)!r}>"


def _outcome(row: Workflow) -> Any:
    if row.status == WorkflowStatus.SUCCEEDED:
        return row.result
    if row.status == WorkflowStatus.CANCELLED:
        raise WorkflowCancelled(f"workflow {row.workflow_id} was cancelled")
    raise JobError(
        row.exc_type or "Error",
        f"workflow {row.workflow_id} failed at member {row.failed_msgid}: {row.exc_message}",
    )


class EagerWorkflowHandle(WorkflowHandle):
    """The handle of a workflow that ran inline (``EAGER``): no row, the value kept."""

    _value: Any

    @classmethod
    def ran(cls, workflow_id: str, value: Any) -> EagerWorkflowHandle:
        handle = cls(workflow_id)
        handle._value = value
        return handle

    @property
    def status(self) -> str:
        return WorkflowStatus.SUCCEEDED

    def wait(self, timeout: float | None = None, poll: float = 0.05) -> Any:
        return self._value

    @property
    def result(self) -> Any:
        return self._value

    def cancel(self) -> None:
        return None  # it already ran


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
