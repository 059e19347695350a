"""eMQP/1.0 commands as frozen, keyword-only dataclasses that check themselves.

Each class knows its command name and the frames of its body (everything
after the msgid). :mod:`.codec` adds the envelope and picks the class when
decoding. A bad field fails at construction with a :class:`ProtocolError`
naming the field.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import ClassVar

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import constants as C
from django_eventmq.protocol.headers import EMPTY_HEADERS, Headers, parse_headers

QueueSpec = tuple[tuple[int, str], ...]
"""``((weight, name), ...)`` as announced by a worker's INFORM."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """Base of every command: all carry a unique ``msgid``."""

    command: ClassVar[str] = ""
    #: Frames after the msgid, as (minimum, maximum) counts.
    body_frames: ClassVar[tuple[int, int]] = (0, 0)

    msgid: str

    def __post_init__(self) -> None:
        if not isinstance(self.msgid, str) or not self.msgid:
            raise ProtocolError(f"{self.command}: msgid must be a non-empty string")

    def wire_command(self) -> str:
        """The command frame to send (differs from :attr:`command` for KBYE)."""
        return self.command

    def body(self) -> list[str]:
        """Frames after the msgid, as text."""
        return []

    @classmethod
    def from_body(cls, msgid: str, body: list[str]) -> Message:
        """Build from frames after the msgid (count already checked)."""
        return cls(msgid=msgid)


def _require(cond: bool, command: str, what: str) -> None:
    if not cond:
        raise ProtocolError(f"{command}: {what}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Ack(Message):
    """Acknowledges the message whose id is ``ack_msgid``."""

    command: ClassVar[str] = C.ACK
    body_frames: ClassVar[tuple[int, int]] = (1, 1)
    ack_msgid: str

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        _require(bool(self.ack_msgid), self.command, "acknowledged msgid is empty")

    def body(self) -> list[str]:
        return [self.ack_msgid]

    @classmethod
    def from_body(cls, msgid: str, body: list[str]) -> Ack:
        return cls(msgid=msgid, ack_msgid=body[0])


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply(Message):
    """A reply. ``payload`` is the spec's MSG frame.

    The reference puts the id of the message being answered in a second frame
    (``REPLY_JSON, ORIGINAL_MSGID`` from a worker); that is ``reply_to``.
    """

    command: ClassVar[str] = C.REPLY
    body_frames: ClassVar[tuple[int, int]] = (1, 2)
    payload: str
    reply_to: str | None = None

    def body(self) -> list[str]:
        if self.reply_to is None:
            return [self.payload]
        return [self.payload, self.reply_to]

    @classmethod
    def from_body(cls, msgid: str, body: list[str]) -> Reply:
        return cls(msgid=msgid, payload=body[0], reply_to=body[1] if len(body) > 1 else None)


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat(Message):
    """Liveness signal carrying the sender's unix time."""

    command: ClassVar[str] = C.HEARTBEAT
    body_frames: ClassVar[tuple[int, int]] = (1, 1)
    timestamp: float

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        _require(
            isinstance(self.timestamp, int | float) and math.isfinite(self.timestamp),
            self.command,
            f"timestamp must be a finite number, got {self.timestamp!r}",
        )

    def body(self) -> list[str]:
        return [repr(float(self.timestamp))]

    @classmethod
    def from_body(cls, msgid: str, body: list[str]) -> Heartbeat:
        try:
            stamp = float(body[0])
        except ValueError:
            raise ProtocolError(f"HEARTBEAT: timestamp {body[0]!r} is not a number") from None
        return cls(msgid=msgid, timestamp=stamp)


@dataclass(frozen=True, slots=True, kw_only=True)
class Disconnect(Message):
    """Asks the receiver to stop, let pending work finish and say KBAI."""

    command: ClassVar[str] = C.DISCONNECT


@dataclass(frozen=True, slots=True, kw_only=True)
class Kbai(Message):
    """Goodbye. The reference spells it KBYE; ``kbye=True`` sends that spelling."""

    command: ClassVar[str] = C.KBAI
    kbye: bool = False

    def wire_command(self) -> str:
        return C.KBYE if self.kbye else C.KBAI


@dataclass(frozen=True, slots=True, kw_only=True)
class Ready(Message):
    """A worker has one free slot."""

    command: ClassVar[str] = C.READY


def _check_name(command: str, what: str, value: str) -> None:
    _require(isinstance(value, str) and bool(value), command, f"{what} is empty")


@dataclass(frozen=True, slots=True, kw_only=True)
class Request(Message):
    """Run the job in ``body`` on ``queue``."""

    command: ClassVar[str] = C.REQUEST
    body_frames: ClassVar[tuple[int, int]] = (3, 3)
    queue: str
    headers: Headers = EMPTY_HEADERS
    body_text: str = field(default="")

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        _check_name(self.command, "queue name", self.queue)

    def body(self) -> list[str]:
        return [self.queue, self.headers.encode(), self.body_text]

    @classmethod
    def from_body(cls, msgid: str, body: list[str]) -> Request:
        return cls(msgid=msgid, queue=body[0], headers=parse_headers(body[1]), body_text=body[2])


@dataclass(frozen=True, slots=True, kw_only=True)
class Publish(Message):
    """Publish ``body_text`` on ``topic``.

    Two forms exist: ``TOPIC, HEADERS, MSG`` (client, spec) and ``TOPIC, MSG``
    (publisher, spec and reference). ``headers`` is None for the second.
    """

    command: ClassVar[str] = C.PUBLISH
    body_frames: ClassVar[tuple[int, int]] = (2, 3)
    topic: str
    body_text: str
    headers: Headers | None = None

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        _check_name(self.command, "topic", self.topic)

    def body(self) -> list[str]:
        if self.headers is None:
            return [self.topic, self.body_text]
        return [self.topic, self.headers.encode(), self.body_text]

    @classmethod
    def from_body(cls, msgid: str, body: list[str]) -> Publish:
        if len(body) == 2:
            return cls(msgid=msgid, topic=body[0], body_text=body[1])
        return cls(msgid=msgid, topic=body[0], headers=parse_headers(body[1]), body_text=body[2])


@dataclass(frozen=True, slots=True, kw_only=True)
class _ScheduleBase(Message):
    """SCHEDULE and UNSCHEDULE share their frames.

    The spec form is ``QUEUE, HEADERS, MSG``; the reference form adds the
    timing: ``QUEUE, HEADERS, INTERVAL_SECS, MSG, CRON`` with interval ``-1``
    or cron ``''`` for "not used". A message with timing is sent in the
    reference form, one without in the spec form.
    """

    body_frames: ClassVar[tuple[int, int]] = (3, 5)
    queue: str
    headers: Headers = EMPTY_HEADERS
    body_text: str = ""
    interval: int | None = None
    cron: str | None = None

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        _check_name(self.command, "queue name", self.queue)
        if self.interval is not None:
            _require(
                type(self.interval) is int and self.interval > 0,
                self.command,
                f"interval must be a whole number of seconds > 0, got {self.interval!r}",
            )
        if self.cron is not None:
            _require(bool(self.cron.strip()), self.command, "cron expression is empty")

    @property
    def has_timing(self) -> bool:
        return self.interval is not None or self.cron is not None

    #: Send the 5-frame form even without timing (``-1`` and ``''``).
    always_timing_frames: ClassVar[bool] = False

    def body(self) -> list[str]:
        if not self.has_timing and not self.always_timing_frames:
            return [self.queue, self.headers.encode(), self.body_text]
        interval = str(self.interval) if self.interval is not None else "-1"
        return [self.queue, self.headers.encode(), interval, self.body_text, self.cron or ""]

    @classmethod
    def from_body(cls, msgid: str, body: list[str]) -> _ScheduleBase:
        if len(body) == 3:
            queue, headers, text = body
            return cls(msgid=msgid, queue=queue, headers=parse_headers(headers), body_text=text)
        if len(body) != 5:
            raise ProtocolError(
                f"{cls.command}: expected 3 body frames (spec) or 5 (reference), got {len(body)}"
            )
        queue, headers, interval_text, text, cron = body
        try:
            interval = int(float(interval_text)) if interval_text.strip() else -1
        except (ValueError, OverflowError):  # "abc", "nan"; "inf", "1e400"
            raise ProtocolError(
                f"{cls.command}: interval {interval_text!r} is not a number"
            ) from None
        return cls(
            msgid=msgid,
            queue=queue,
            headers=parse_headers(headers),
            body_text=text,
            interval=interval if interval > 0 else None,
            cron=cron if cron.strip() else None,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule(_ScheduleBase):
    """Run a job periodically (interval seconds or a cron expression)."""

    command: ClassVar[str] = C.SCHEDULE


@dataclass(frozen=True, slots=True, kw_only=True)
class Unschedule(_ScheduleBase):
    """Stop a schedule; without timing, every schedule of that job body.

    Always sent in the reference's 5-frame form: its scheduler reads the timing
    frames of an UNSCHEDULE even when they say "none".
    """

    command: ClassVar[str] = C.UNSCHEDULE
    always_timing_frames: ClassVar[bool] = True


@dataclass(frozen=True, slots=True, kw_only=True)
class Inform(Message):
    """A worker (job manager) or scheduler announces itself.

    ``queues`` is empty for a scheduler, and for a worker that sent an empty
    queue frame (the reference does: it means the default queue).
    """

    command: ClassVar[str] = C.INFORM
    body_frames: ClassVar[tuple[int, int]] = (2, 2)
    queues: QueueSpec = ()
    peer_type: str = C.PEER_WORKER

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        _require(
            self.peer_type in C.PEER_TYPES,
            self.command,
            f"peer type must be one of {sorted(C.PEER_TYPES)}, got {self.peer_type!r}",
        )
        for weight, name in self.queues:
            _require(
                type(weight) is int and isinstance(name, str) and bool(name),
                self.command,
                f"queue entry must be (int weight, non-empty name), got {(weight, name)!r}",
            )

    def effective_queues(self) -> QueueSpec:
        """The queues to serve: the default queue when none were named."""
        return self.queues or ((C.DEFAULT_QUEUE_WEIGHT, C.DEFAULT_QUEUE_NAME),)

    def body(self) -> list[str]:
        text = json.dumps([[w, n] for w, n in self.queues]) if self.queues else ""
        return [text, self.peer_type]

    @classmethod
    def from_body(cls, msgid: str, body: list[str]) -> Inform:
        return cls(msgid=msgid, queues=parse_queue_spec(body[0]), peer_type=body[1])


def parse_queue_spec(text: str) -> QueueSpec:
    """Parse INFORM's queue frame.

    Accepts ``""`` (default queue), a JSON list of ``[weight, name]`` pairs or
    of names, the spec's ``[40, 'email'],[10, 'default']`` and plain
    ``email,default``.
    """
    text = text.strip()
    if not text:
        return ()
    if text.startswith("["):
        # JSON first; the spec's example uses single quotes and no outer list.
        normalised = text.replace("'", '"')
        try:
            value = json.loads(normalised)
        except ValueError:
            try:
                value = json.loads(f"[{normalised}]")
            except ValueError:
                raise ProtocolError(f"INFORM: queue list {text!r} is not valid") from None
        if isinstance(value, list) and len(value) == 2 and type(value[0]) is int:
            value = [value]  # a single "[40, 'email']"
        if not isinstance(value, list):
            raise ProtocolError(f"INFORM: queue list {text!r} is not a list")
    else:
        value = [name.strip() for name in text.split(",") if name.strip()]
    queues: list[tuple[int, str]] = []
    for item in value:
        if isinstance(item, str):
            queues.append((C.DEFAULT_QUEUE_WEIGHT, item))
        elif (
            isinstance(item, list)
            and len(item) == 2
            and type(item[0]) is int
            and isinstance(item[1], str)
        ):
            queues.append((item[0], item[1]))
        else:
            raise ProtocolError(f"INFORM: queue entry {item!r} is not [weight, name] or a name")
    return tuple(queues)


@dataclass(frozen=True, slots=True, kw_only=True)
class AdminRequest(Message):
    """An administrative command (STATUS, ROUTER_SHOW_WORKERS, ..., DISCONNECT)."""

    body_frames: ClassVar[tuple[int, int]] = (0, 0)
    action: str
    #: Frames after the msgid (POISONED_RETRY / POISONED_PURGE: the jobs' msgids).
    arguments: tuple[str, ...] = ()
    #: The router's admin token, the proof a state-changing command carries
    #: (``C.ADMIN_TOKEN_PREFIX`` + token, the first frame after the msgid); "": none.
    #: Kept out of ``repr``, so no log line shows it.
    token: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        Message.__post_init__(self)
        _require(
            self.action in C.ADMIN_COMMANDS,
            "admin",
            f"unknown administrative command {self.action!r}",
        )

    def wire_command(self) -> str:
        return self.action

    def body(self) -> list[str]:
        if self.token:
            return [C.ADMIN_TOKEN_PREFIX + self.token, *self.arguments]
        return list(self.arguments)


#: Command name -> class, for decoding. KBYE decodes to :class:`Kbai`.
MESSAGE_TYPES: dict[str, type[Message]] = {
    cls.command: cls
    for cls in (
        Ack,
        Reply,
        Heartbeat,
        Disconnect,
        Kbai,
        Ready,
        Request,
        Publish,
        Schedule,
        Unschedule,
        Inform,
    )
}
