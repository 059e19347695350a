"""Turn messages into frames and frames into messages.

Frames are what a DEALER sends: ``['', 'eMQP/1.0', COMMAND, MSGID, *body]``.
A ROUTER sees the peer's routing identity before them; :func:`split_identity`
takes it off. One frame is a packed message (:mod:`.packed`) and decodes as the
frames it carries. Every decode failure is one :class:`ProtocolError` that says
what is wrong and keeps the raw frames.
"""

from __future__ import annotations

from collections.abc import Sequence

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import constants as C
from django_eventmq.protocol.messages import (
    MESSAGE_TYPES,
    AdminRequest,
    Kbai,
    Message,
    Reply,
    Request,
)
from django_eventmq.protocol.packed import request_of, unpack

_EMPTY = b""
_VERSION = C.PROTOCOL_VERSION_B
_REPLY = C.REPLY.encode()
_REQUEST = C.REQUEST_B

#: Frames longer than this are not shown whole in error messages.
_SHOW = 60


def encode(message: Message) -> list[bytes]:
    """Frames for ``message``, as a DEALER sends them."""
    return [
        _EMPTY,
        _VERSION,
        message.wire_command().encode(),
        message.msgid.encode(),
        *[part.encode() for part in message.body()],
    ]


def encode_to(identity: bytes, message: Message) -> list[bytes]:
    """Frames for a ROUTER to send ``message`` to the peer ``identity``."""
    frames = encode(message)
    frames.insert(0, identity)
    return frames


def split_identity(frames: Sequence[bytes]) -> tuple[bytes, Sequence[bytes]]:
    """Split what a ROUTER received into (identity, frames)."""
    if len(frames) < 2:
        raise ProtocolError(
            f"expected an identity and a message, got {len(frames)} frame(s)", frames
        )
    return frames[0], frames[1:]


def decode(frames: Sequence[bytes], *, admin: bool = False) -> Message:
    """Parse frames (without a routing identity) into a message.

    ``admin=True`` also accepts the administrative commands, which only the
    router's admin socket serves.
    """
    try:
        return _decode(frames, admin)
    except ProtocolError as exc:
        if exc.frames:
            raise
        raise exc.with_frames(frames) from exc.__cause__


def reply_of(frames: Sequence[bytes]) -> Reply | None:
    """:func:`decode` of a REPLY with its ``reply_to`` frame (a job's outcome, as a
    router sends it to the client), or None for anything else (:func:`decode` reads
    it, or says what is wrong with it): the one message ``.wait()`` waits for,
    without the checks and look-ups every other command needs."""
    if len(frames) != 6:
        return None
    empty, version, command, msgid, payload, reply_to = frames
    if command != _REPLY or version != _VERSION or empty:
        return None
    try:
        return Reply(msgid=msgid.decode(), payload=payload.decode(), reply_to=reply_to.decode())
    except (UnicodeDecodeError, ProtocolError):
        return None


def packed_request(frame: bytes) -> Request | None:
    """:func:`decode` of a packed REQUEST (:mod:`.packed`, one frame as a DEALER
    receives it), or None for anything else (:func:`decode` reads it, or says what
    is wrong with it): a job handed to a job manager, straight from the frame to
    its fields (:func:`.packed.request_of`), without the frame list and generic
    checks of :func:`decode`. Same message, same :class:`ProtocolError` (and
    reason) for the same frame."""
    fields = request_of(frame)
    if fields is None:
        return None
    return _request(*fields)


def plain_request(frames: Sequence[bytes]) -> Request | None:
    """:func:`decode` of a REQUEST's own frames (``['', 'eMQP/1.0', 'REQUEST',
    MSGID, QUEUE, HEADERS, BODY]``, as a bundle from the router carries each
    job), or None for anything else: as :func:`packed_request`, the same message
    or the same :class:`ProtocolError` as :func:`decode` gives for them."""
    if len(frames) != 7:
        return None
    empty, version, command, msgid, queue, headers, body = frames
    if command != _REQUEST or version != _VERSION or empty:
        return None
    return _request(msgid, queue, headers, body)


def _request(msgid: bytes, queue: bytes, headers: bytes, body: bytes) -> Request:
    """The Request of a REQUEST's fields, checked as :func:`decode` checks them."""
    try:
        # In decode's order, so the first bad frame gives the same reason.
        text = msgid.decode()
        rest = [queue.decode(), headers.decode(), body.decode()]
        return Request.from_body(text, rest)
    except UnicodeDecodeError as exc:
        error = _not_utf8(exc)
        error.__cause__ = exc
    except ProtocolError as exc:
        if exc.frames:
            raise
        error = exc
    # As decode() raises it: carrying the REQUEST's frames.
    frames = [_EMPTY, _VERSION, _REQUEST, msgid, queue, headers, body]
    raise error.with_frames(frames) from error.__cause__


#: More frames than any eMQP message has (mirrors limits.MAX_FRAMES; a transport
#: cuts longer messages to just over its own cap, which lands here or in the count check).
MAX_FRAMES = 32


def _decode(frames: Sequence[bytes], admin: bool) -> Message:
    if len(frames) == 1:
        frames = unpack(frames[0], max_frames=MAX_FRAMES)  # a packed message (see .packed)
    if len(frames) > MAX_FRAMES:
        raise ProtocolError(f"message has more than {MAX_FRAMES} frames (MAX_FRAMES)")
    if len(frames) < 4:
        raise ProtocolError(f"too short: {len(frames)} frame(s), a message has at least 4")
    if frames[0] != _EMPTY:
        raise ProtocolError(f"frame 0 must be empty, got {describe(frames[0])}")
    if frames[1] != _VERSION:
        raise ProtocolError(
            f"unsupported protocol version {describe(frames[1])}, expected {C.PROTOCOL_VERSION}"
        )
    try:
        text = [frame.decode() for frame in frames[2:]]
    except UnicodeDecodeError as exc:
        raise _not_utf8(exc) from exc
    command, msgid, body = text[0], text[1], text[2:]
    if command == C.KBYE:
        _check_count(command, body, Kbai.body_frames)
        return Kbai(msgid=msgid, kbye=True)
    if admin and command in C.ADMIN_COMMANDS:
        token = ""
        if body and body[0].startswith(C.ADMIN_TOKEN_PREFIX):
            token, body = body[0][len(C.ADMIN_TOKEN_PREFIX) :], body[1:]
        return AdminRequest(msgid=msgid, action=command, arguments=tuple(body), token=token)
    cls = MESSAGE_TYPES.get(command)
    if cls is None:
        raise ProtocolError(f"unknown command {describe(frames[2])}")
    _check_count(command, body, cls.body_frames)
    return cls.from_body(msgid, body)


def _not_utf8(exc: UnicodeDecodeError) -> ProtocolError:
    return ProtocolError(f"a frame is not valid UTF-8: {exc.reason}")


def _check_count(command: str, body: list[str], bounds: tuple[int, int]) -> None:
    low, high = bounds
    if not low <= len(body) <= high:
        want = str(low) if low == high else f"{low} to {high}"
        raise ProtocolError(f"{command}: expected {want} frame(s) after the msgid, got {len(body)}")


def describe(frame: bytes) -> str:
    """A short printable form of a frame for logs and errors."""
    shown = frame[:_SHOW]
    suffix = f"... ({len(frame)} bytes)" if len(frame) > _SHOW else ""
    return repr(shown) + suffix
