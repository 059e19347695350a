"""The sending side of workflows: signatures, the plan of stages, member msgids and bodies.

A workflow is a list of *stages*; each stage is one or more signatures that
run in parallel. ``chain(a.s(1), b.s(), c.s())`` is three stages of one,
``group(a.s(1), a.s(2))`` one stage of two, ``chord(group(...), cb.s())`` a
stage of N then a stage of one. A stage's input is the result of the stage
before it: its one member's value, or the list of its members' values in
member order; each member gets it as its first argument.

Every member is sent as the workflow step runner job (:data:`RUNNER`, which
the Django app registers in every worker) with the member's job, arguments and
place as its arguments, under a msgid derived from the workflow id and the
place (:func:`member_msgid`): a step sent twice (a job manager died between
sending the next stage and reporting the current one) is refused by the
router's msgid dedup, so it runs once. The Django glue
(:mod:`django_eventmq.workflows`) keeps the state and sends the stages.
No Django here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django_eventmq.client.connection import Client
from django_eventmq.client.shards import ShardedClient
from django_eventmq.errors import ConfigurationError, ProtocolError, SerializationError
from django_eventmq.protocol import Headers, parse_headers
from django_eventmq.protocol.payload import compact_json

#: Where the step runner is registered (``django_eventmq/jobs.py``).
RUNNER_PATH = "django_eventmq.jobs"
RUNNER_CALLABLE = "run_workflow_step"
RUNNER = f"{RUNNER_PATH}.{RUNNER_CALLABLE}"

_MSGID = re.compile(r"^wf-([0-9a-f]{32})-(\d+)-(\d+)$")


def member_msgid(workflow_id: str, stage: int, member: int) -> str:
    """The msgid of a member: the same every time it is sent, so the router dedups it."""
    return f"wf-{workflow_id}-{stage}-{member}"


def parse_member_msgid(msgid: str) -> tuple[str, int, int] | None:
    """``(workflow id, stage, member)`` of a member's msgid; None for any other msgid."""
    found = _MSGID.match(msgid)
    if found is None:
        return None
    return found.group(1), int(found.group(2)), int(found.group(3))


def _json_copy(value: Any, what: str) -> Any:
    try:
        return json.loads(compact_json(value))
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{what} is not JSON-serialisable: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Signature:
    """A job with its arguments and options, to run later as a workflow member.

    Made by ``job.s(*args, **kwargs)``. Immutable: the arguments are copied
    (through JSON) when it is made, so changing the caller's objects later
    changes nothing; :meth:`set` returns a changed copy.
    """

    path: str
    callable: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    queue: str = "default"
    #: The job's headers as sent (``Headers.encode()`` text).
    headers: str = ""

    @classmethod
    def of(
        cls,
        path: str,
        callable_name: str,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        *,
        queue: str,
        headers: Headers,
    ) -> Signature:
        name = f"{path}.{callable_name}"
        copied_args, copied_kwargs = _json_copy([list(args), dict(kwargs)], f"{name}.s() arguments")
        return cls(
            path=path,
            callable=callable_name,
            args=tuple(copied_args),
            kwargs=copied_kwargs,
            queue=queue,
            headers=headers.encode(),
        )

    @property
    def name(self) -> str:
        """The job's dotted name (as ``@job`` registered it)."""
        return f"{self.path}.{self.callable}"

    def set(self, *, queue: str | None = None, **headers: Any) -> Signature:
        """A copy on another ``queue`` and/or with header fields changed
        (``retry_count=2``, ``timeout=60``, ...)."""
        if queue is not None and not queue:
            raise ConfigurationError("Signature.set(queue=) takes a queue name, got ''")
        try:
            merged = self.parsed_headers().with_(**headers)
        except (ProtocolError, TypeError) as exc:
            raise ConfigurationError(f"{self.name}.s(...).set(): {exc}") from exc
        return Signature(
            path=self.path,
            callable=self.callable,
            args=self.args,
            kwargs=self.kwargs,
            queue=queue or self.queue,
            headers=merged.encode(),
        )

    def parsed_headers(self) -> Headers:
        return parse_headers(self.headers) if self.headers else Headers()

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "callable": self.callable,
            "args": list(self.args),
            "kwargs": dict(self.kwargs),
            "queue": self.queue,
            "headers": self.headers,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Signature:
        return cls(
            path=str(data["path"]),
            callable=str(data["callable"]),
            args=tuple(data.get("args") or ()),
            kwargs=dict(data.get("kwargs") or {}),
            queue=str(data.get("queue") or "default"),
            headers=str(data.get("headers") or ""),
        )

    def __repr__(self) -> str:
        shown = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.name}.s({', '.join(shown)})"


#: The stages of a workflow: each a tuple of signatures run in parallel.
Stages = tuple[tuple[Signature, ...], ...]


def stages_to_json(stages: Stages) -> list[list[dict[str, Any]]]:
    return [[member.to_json() for member in stage] for stage in stages]


def stages_from_json(data: Sequence[Sequence[Mapping[str, Any]]]) -> Stages:
    return tuple(tuple(Signature.from_json(member) for member in stage) for stage in data)


def stage_input(values: Sequence[Any], size: int) -> Any:
    """What a finished stage passes on: its one value, or the list of its values."""
    return values[0] if size == 1 else list(values)


def member_call(member: Signature, stage: int, given: Any) -> tuple[list[Any], dict[str, Any]]:
    """The member's arguments: the previous stage's result first (from stage 1 on)."""
    args = list(member.args)
    if stage > 0:
        args.insert(0, given)
    return args, dict(member.kwargs)


def member_body(workflow_id: str, stage: int, index: int, member: Signature, given: Any) -> str:
    """The JSON body of the step runner job that runs ``member`` (:data:`RUNNER`)."""
    args, kwargs = member_call(member, stage, given)
    place = {"workflow": workflow_id, "stage": stage, "member": index, "queue": member.queue}
    try:
        runner_args = compact_json([member.name, args, kwargs, place])
    except (TypeError, ValueError) as exc:
        raise SerializationError(
            f"workflow {workflow_id}: the input of {member.name} (the result of the stage "
            f"before it) is not JSON-serialisable: {exc}"
        ) from exc
    return (
        f'["run",{{"callable":"{RUNNER_CALLABLE}","path":"{RUNNER_PATH}",'
        f'"args":{runner_args},"kwargs":{{}},"class_args":[],"class_kwargs":{{}}}}]'
    )


def member_headers(member: Signature) -> Headers:
    """The member's own headers, replying (so job managers record its row)."""
    return member.parsed_headers().with_(reply_requested=True)


def send_stage(
    client: Client | ShardedClient,
    workflow_id: str,
    stage: int,
    members: Sequence[Signature],
    given: Any,
    *,
    ack_timeout: float,
    retries: int,
) -> list[str]:
    """Send every member of ``stage`` and wait for the router to store each (its ACK).

    Returns their msgids. Raises :class:`BrokerUnavailable` when one was not
    acknowledged after ``retries`` resends. Sending a stage again is harmless:
    the router refuses msgids it holds or finished within ``DEDUP_WINDOW``.
    """
    sent: list[str] = []
    for index, member in enumerate(members):
        msgid = member_msgid(workflow_id, stage, index)
        body = member_body(workflow_id, stage, index, member, given)
        client.send_request_guaranteed(
            msgid.encode(),
            member.queue.encode(),
            member_headers(member).encode().encode(),
            body.encode(),
            ack_timeout=ack_timeout,
            retries=retries,
        )
        sent.append(msgid)
    return sent


def all_member_msgids(workflow_id: str, stages: Stages) -> list[str]:
    return [
        member_msgid(workflow_id, stage, index)
        for stage, members in enumerate(stages)
        for index in range(len(members))
    ]
