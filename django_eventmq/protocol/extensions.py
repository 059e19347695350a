"""Our extensions to eMQP/1.0, spoken only between peers that announced them.

The reference ignores commands it does not know once a conversation is up,
but it drops everything but ACK and DISCONNECT before, and some of its
parsers crash on unexpected frames. So a router of ours sends FEATURES right
after it acknowledges an INFORM; only a peer that has received FEATURES (or
that sent one) uses the other commands here. A reference peer never sees
them.

Commands (frames after the msgid):

- ``FEATURES  JSON``: what the sender supports, e.g. ``{"done": 1, "cancel": 1}``.
- ``DONE  JOB_MSGID, STATUS, PAYLOAD``: a job manager finished a job. It
  replaces READY + REPLY: the slot is free again, and ``PAYLOAD`` is the
  reply text (``{"value": ...}`` or with ``"error"``) that the router sends
  on to the client when the job asked for a reply.
- ``NACK  JOB_MSGID, REASON``: a job manager hands a job back unrun (it is
  stopping, or cannot take it now); the router queues it again at once. The
  slot is free again.
- ``CANCEL  JOB_MSGID``: client -> router, and router -> job manager.
- ``REJECT  JOB_MSGID, REASON``: the router (or a job manager through it)
  refuses a job; sent to the client that asked. Also router -> the job
  manager that reported a job's last worker death (if its FEATURES said
  ``"poisoned"``): the job is set aside as poisoned, so it records its end.
- ``PARTIAL  JOB_MSGID, JSON``: a running job reported progress or yielded a
  partial result; job manager -> router (only to a router whose FEATURES
  said ``"partial"``), and router -> the client that asked (reply-requested
  jobs only). ``JSON`` is an object ``{"value": ...}``. Zero or more PARTIALs
  precede the job's one outcome (REPLY or REJECT), as in the Majordomo-based
  draft (seeds/002). Not journaled: a PARTIAL lost on the way is not sent again.
- ``UNREADY  COUNT``: a job manager takes back up to ``COUNT`` of the free
  slots it announced (with READY, or freed with DONE/NACK): it wants fewer
  jobs (its prefetch shrank because jobs run long). The router drops at most
  the free slots it still holds; jobs already on their way are the job
  manager's. Sent only to a router whose FEATURES said ``"unready"``.
- ``QUEUED  JSON``: a job manager names the jobs it holds and has not started
  (prefetched behind a running job, or waiting for a child), a JSON list of
  msgids. The router starts the lease of each one it has in flight on that job
  manager again: a job's lease counts from the last time it was named waiting,
  not from its hand-out, so one prefetched behind a long job is not handed out
  a second time while it waits. Sent about once a second while such jobs are
  held, only to a router whose FEATURES said ``"queued"``.
- ``RUNNING  JSON``: job manager -> router, what its worker processes run now:
  ``{"JOB_MSGID": [PID, SECONDS_RUNNING], ...}`` (the whole set, not a
  change). Sent when the set changed, at most every half second, and again
  every few seconds while it is not empty, only to a router whose FEATURES
  said ``"running"``; the router keeps the last one per job manager for
  ``emq_status --jobs``. Jobs it holds that are not in it wait in the job
  manager (prefetched).
- ``BATCH  JOBS``: client -> router, many REQUESTs in one message (one JOBS
  frame, packed as :mod:`.batch` says; at most ``MAX_BATCH_JOBS`` jobs and
  the router's frame size). The router checks each job as it checks a
  REQUEST: one that fails gets its own REJECT at once; the others are stored
  (or recognised as held or recently finished: a resend runs nothing twice).
  Then ONE ``ACK`` carrying the BATCH's msgid, sent after the journal
  commit, says every job of it that was not REJECTed is stored. A BATCH that
  cannot be unpacked is logged and dropped, with no ACK.

Negotiation on the frontend: a client of ours sends ``FEATURES`` (e.g.
``{"batch": 1}``) when it starts sending and goes on with plain REQUESTs.
Our router answers it with its own FEATURES, ``{"batch": 1, "batch_jobs":
N, "batch_bytes": M}`` (most jobs, most bytes in one JOBS frame); only then
does the client send BATCH. The reference router ignores a FEATURES on its
frontend (it drops any client command it does not know, and keeps serving
REQUESTs), so against it a client keeps sending REQUESTs. The same exchange
(key ``"packed"``) lets peers of ours carry a message in one frame
(:mod:`.packed`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from django_eventmq.errors import ProtocolError

# BATCH lives in its own module (the packing); re-exported with the other extensions.
from django_eventmq.protocol.batch import BATCH as BATCH
from django_eventmq.protocol.batch import MAX_BATCH_JOBS as MAX_BATCH_JOBS
from django_eventmq.protocol.batch import Batch as Batch
from django_eventmq.protocol.batch import pack_jobs as pack_jobs
from django_eventmq.protocol.batch import unpack_jobs as unpack_jobs
from django_eventmq.protocol.messages import MESSAGE_TYPES, Message
from django_eventmq.protocol.status import DONE_STATUSES

FEATURES = "FEATURES"
DONE = "DONE"
NACK = "NACK"
CANCEL = "CANCEL"
REJECT = "REJECT"
PARTIAL = "PARTIAL"
UNREADY = "UNREADY"
QUEUED = "QUEUED"
RUNNING = "RUNNING"

#: Longest PARTIAL payload (characters): progress is small; results go in the reply.
MAX_PARTIAL_BYTES = 1024 * 1024


#: Longest REJECT reason taken from a job manager's refusal.
MAX_REASON_CHARS = 1000


def payload_error(payload: str, default: str) -> str:
    """The error message of a DONE payload (``{"error": {"message": ...}}``), cut to a
    REJECT reason's length; ``default`` when it has none."""
    try:
        error = json.loads(payload).get("error") or {}
        reason = str(error.get("message") or "")
    except (ValueError, AttributeError):
        reason = payload
    return reason[:MAX_REASON_CHARS] or default


def refusal_reason(payload: str) -> str:
    """The REJECT reason for a DONE ``refused`` payload."""
    return payload_error(payload, "refused by the job manager")


def _json_body(command: str, text: str) -> Any:
    """A body frame that holds JSON, decoded (ProtocolError naming ``command`` if not)."""
    try:
        return json.loads(text)
    except ValueError:
        raise ProtocolError(f"{command}: body is not JSON") from None


def _job_msgid(command: str, value: str) -> None:
    if not isinstance(value, str) or not value:
        raise ProtocolError(f"{command}: job msgid is empty")


def _json_frame(value: Any) -> str:
    """A JSON body frame: compact, keys sorted (the same bytes for the same value)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class Features(Message):
    """Announces the extensions the sender speaks."""

    command: ClassVar[str] = FEATURES
    body_frames: ClassVar[tuple[int, int]] = (1, 1)
    features: dict[str, Any]

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        if not isinstance(self.features, dict):
            raise ProtocolError("FEATURES: body must be a JSON object")

    def body(self) -> list[str]:
        return [_json_frame(self.features)]

    @classmethod
    def from_body(cls, msgid: str, body: list[str]) -> Features:
        return cls(msgid=msgid, features=_json_body(cls.command, body[0]))


@dataclass(frozen=True, slots=True, kw_only=True)
class Done(Message):
    """A job manager finished ``job_msgid`` with ``status``; its slot is free."""

    command: ClassVar[str] = DONE
    body_frames: ClassVar[tuple[int, int]] = (3, 3)
    job_msgid: str
    status: str
    payload: str = ""

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        _job_msgid(self.command, self.job_msgid)
        if self.status not in DONE_STATUSES:
            known = sorted(map(str, DONE_STATUSES))
            raise ProtocolError(f"DONE: status must be one of {known}, got {self.status!r}")

    def body(self) -> list[str]:
        return [self.job_msgid, self.status, self.payload]

    @classmethod
    def from_body(cls, msgid: str, body: list[str]) -> Done:
        return cls(msgid=msgid, job_msgid=body[0], status=body[1], payload=body[2])


@dataclass(frozen=True, slots=True, kw_only=True)
class Nack(Message):
    """A job manager gives ``job_msgid`` back unrun; its slot is free."""

    command: ClassVar[str] = NACK
    body_frames: ClassVar[tuple[int, int]] = (2, 2)
    job_msgid: str
    reason: str = ""

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        _job_msgid(self.command, self.job_msgid)

    def body(self) -> list[str]:
        return [self.job_msgid, self.reason]

    @classmethod
    def from_body(cls, msgid: str, body: list[str]) -> Nack:
        return cls(msgid=msgid, job_msgid=body[0], reason=body[1])


@dataclass(frozen=True, slots=True, kw_only=True)
class Cancel(Message):
    """Cancel ``job_msgid``: drop it if queued, stop it if running."""

    command: ClassVar[str] = CANCEL
    body_frames: ClassVar[tuple[int, int]] = (1, 1)
    job_msgid: str

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        _job_msgid(self.command, self.job_msgid)

    def body(self) -> list[str]:
        return [self.job_msgid]

    @classmethod
    def from_body(cls, msgid: str, body: list[str]) -> Cancel:
        return cls(msgid=msgid, job_msgid=body[0])


@dataclass(frozen=True, slots=True, kw_only=True)
class Reject(Message):
    """``job_msgid`` was refused; ``reason`` says why."""

    command: ClassVar[str] = REJECT
    body_frames: ClassVar[tuple[int, int]] = (2, 2)
    job_msgid: str
    reason: str

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        _job_msgid(self.command, self.job_msgid)

    def body(self) -> list[str]:
        return [self.job_msgid, self.reason]

    @classmethod
    def from_body(cls, msgid: str, body: list[str]) -> Reject:
        return cls(msgid=msgid, job_msgid=body[0], reason=body[1])


@dataclass(frozen=True, slots=True, kw_only=True)
class Partial(Message):
    """A partial reply to ``job_msgid``: ``payload`` is ``{"value": ...}`` as JSON text."""

    command: ClassVar[str] = PARTIAL
    body_frames: ClassVar[tuple[int, int]] = (2, 2)
    job_msgid: str
    payload: str

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        _job_msgid(self.command, self.job_msgid)
        if not isinstance(self.payload, str) or len(self.payload) > MAX_PARTIAL_BYTES:
            raise ProtocolError(
                f"PARTIAL: payload is not text of at most {MAX_PARTIAL_BYTES} bytes"
            )
        try:
            value = json.loads(self.payload)
        except ValueError:
            raise ProtocolError("PARTIAL: payload is not JSON") from None
        if not isinstance(value, dict) or "value" not in value:
            raise ProtocolError('PARTIAL: payload must be a JSON object with a "value" key')

    @property
    def value(self) -> Any:
        """The reported value (the payload's ``"value"``)."""
        return json.loads(self.payload)["value"]

    def body(self) -> list[str]:
        return [self.job_msgid, self.payload]

    @classmethod
    def from_body(cls, msgid: str, body: list[str]) -> Partial:
        return cls(msgid=msgid, job_msgid=body[0], payload=body[1])


@dataclass(frozen=True, slots=True, kw_only=True)
class Unready(Message):
    """A job manager takes back up to ``count`` of its free slots."""

    command: ClassVar[str] = UNREADY
    body_frames: ClassVar[tuple[int, int]] = (1, 1)
    count: int

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ProtocolError(f"UNREADY: count must be a whole number >= 1, got {self.count!r}")

    def body(self) -> list[str]:
        return [str(self.count)]

    @classmethod
    def from_body(cls, msgid: str, body: list[str]) -> Unready:
        text = body[0]
        if not (text.isascii() and text.isdigit()) or len(text) > 9:
            raise ProtocolError(f"UNREADY: count is not a whole number: {text[:20]!r}")
        return cls(msgid=msgid, count=int(text))


@dataclass(frozen=True, slots=True, kw_only=True)
class Queued(Message):
    """A job manager holds ``job_msgids`` and has not started them (their leases start again)."""

    command: ClassVar[str] = QUEUED
    body_frames: ClassVar[tuple[int, int]] = (1, 1)
    job_msgids: tuple[str, ...]

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        if not isinstance(self.job_msgids, tuple) or not all(
            isinstance(m, str) and m for m in self.job_msgids
        ):
            raise ProtocolError("QUEUED: job msgids must be non-empty strings")

    def body(self) -> list[str]:
        return [json.dumps(self.job_msgids, separators=(",", ":"))]

    @classmethod
    def from_body(cls, msgid: str, body: list[str]) -> Queued:
        value = _json_body(cls.command, body[0])
        if not isinstance(value, list):
            raise ProtocolError("QUEUED: body must be a JSON list of msgids")
        return cls(msgid=msgid, job_msgids=tuple(value))


@dataclass(frozen=True, slots=True, kw_only=True)
class Running(Message):
    """The jobs a job manager's worker processes run now: ``{msgid: (pid, seconds)}``."""

    command: ClassVar[str] = RUNNING
    body_frames: ClassVar[tuple[int, int]] = (1, 1)
    jobs: dict[str, tuple[int, float]]

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        if not isinstance(self.jobs, dict):
            raise ProtocolError("RUNNING: body must be a JSON object")
        for msgid, entry in self.jobs.items():
            ok = (
                isinstance(msgid, str)
                and 0 < len(msgid) <= 100
                and isinstance(entry, tuple | list)
                and len(entry) == 2
                and all(
                    isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in entry
                )
            )
            if not ok:
                raise ProtocolError(
                    f"RUNNING: expected {{msgid: [pid, seconds]}}, got {msgid!r}: {entry!r}"[:200]
                )

    def body(self) -> list[str]:
        return [_json_frame({m: [int(p), round(float(a), 3)] for m, (p, a) in self.jobs.items()})]

    @classmethod
    def from_body(cls, msgid: str, body: list[str]) -> Running:
        value = _json_body(cls.command, body[0])
        if not isinstance(value, dict):
            raise ProtocolError("RUNNING: body must be a JSON object")
        return cls(
            msgid=msgid, jobs={k: tuple(v) if isinstance(v, list) else v for k, v in value.items()}
        )


for _cls in (Features, Done, Nack, Cancel, Reject, Partial, Unready, Queued, Running):
    MESSAGE_TYPES[_cls.command] = _cls
