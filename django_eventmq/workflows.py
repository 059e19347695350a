"""Workflows: ``chain``, ``group`` and ``chord`` of ``@job`` signatures (``job.s(...)``).

::

    from django_eventmq import chain, chord, group

    handle = chain(fetch.s(url), parse.s(), store.s()).delay()
    handle.wait(timeout=60)             # store's result
    group(resize.s(p) for p in paths).delay().wait()     # [each result]
    chord(group(count.s(f) for f in files), total.s()).delay().wait()

The plan is written to the :class:`~django_eventmq.models.Workflow` row when
the workflow is sent; then the first stage is sent. This is the sending side
(web processes, shells); what runs in the workers (each member, the next
stage sent, a member failed for good failing its workflow) is
:mod:`.workflow_steps`. See docs/workflows.md for the races and why each is
safe.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.utils import timezone

from django_eventmq.client import handles
from django_eventmq.client.commit import send_at_commit
from django_eventmq.client.pool import get_client
from django_eventmq.client.workflows import (
    Signature,
    Stages,
    all_member_msgids,
    send_stage,
    stages_from_json,
    stages_to_json,
)
from django_eventmq.errors import (
    ConfigurationError,
    EventMQError,
    JobError,
    ResultTimeout,
    WorkflowCancelled,
)
from django_eventmq.models.workflows import Workflow, WorkflowStatus
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

_OVER = (WorkflowStatus.SUCCEEDED, WorkflowStatus.FAILED, WorkflowStatus.CANCELLED)


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
            # EAGER: the members run here, as a worker would run them.
            from django_eventmq.workflow_steps import run_inline

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
