"""Named fields over received frames, for the hot paths that skip :func:`.codec.decode`.

A ROUTER receives ``[identity, '', 'eMQP/1.0', COMMAND, MSGID, *body]``, a
DEALER the same without the identity. The router's frontend and backend and
a client's pipeline read the few messages that come once per job (REQUEST,
BATCH, READY, DONE, ACK) straight from those frames; this module is the one
place that knows where each field sits. :func:`routed` (and :func:`dealer_ack`)
make ONE check of the length, the empty delimiter and the version, pick the
view by the command, and give the fields by name (the ``*_fields`` functions
give the same fields as a plain tuple, for the hot paths); anything else is ``None``
and goes through :func:`.codec.decode`, whose error says what is wrong
(:func:`refusal` says it without decoding).

What a view does not check: UTF-8 text, empty msgids, header syntax, limits:
the caller checks what it uses (the router decodes each field once anyway).

Why frames are unpacked rather than indexed (``benchmarks/frame_views.py``):
sequence unpacking is the cheapest way to name a list's items in CPython,
cheaper than the indexing it replaces.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import Final, NamedTuple

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import constants as C
from django_eventmq.protocol.packed import PREFIX as _PACKED_PREFIX
from django_eventmq.protocol.packed import unpack

_VERSION: Final = C.PROTOCOL_VERSION_B
_REQUEST: Final = C.REQUEST_B
_BATCH: Final = C.BATCH_B
_READY: Final = C.READY_B
_DONE: Final = C.DONE_B
_ACK: Final = C.ACK_B
#: How a packed message starts when its command is three letters long: only ACK is.
_PACKED_ACK_HEAD: Final = b"%s%d," % (_PACKED_PREFIX, len(_ACK))
_new = tuple.__new__

#: The routing identity of frames a ROUTER received or sends (its envelope).
identity_of: Final = itemgetter(0)


#: The frames after the routing identity: the message as its DEALER sent it.
def after_identity(raw: list[bytes]) -> list[bytes]:
    """``raw`` (as a ROUTER received it) without its routing identity."""
    return raw[1:]


#: The one frame of a packed message (``[identity, PACKED]`` or ``[PACKED]``).
_last = itemgetter(-1)


class RequestView(NamedTuple):
    """A REQUEST as a ROUTER received it."""

    identity: bytes
    msgid: bytes
    queue: bytes
    headers: bytes
    body: bytes

    def frames(self) -> list[bytes]:
        """The frames its client sent (as the router stores and hands them out)."""
        return request_frames(self.msgid, self.queue, self.headers, self.body)


class BatchView(NamedTuple):
    """A BATCH as a ROUTER received it (``jobs``: the JOBS frame, see :mod:`.batch`)."""

    identity: bytes
    msgid: bytes
    jobs: bytes


class ReadyView(NamedTuple):
    """A READY as a ROUTER received it."""

    identity: bytes
    msgid: bytes


class DoneView(NamedTuple):
    """A DONE (our extension) as a ROUTER received it."""

    identity: bytes
    msgid: bytes
    job_msgid: bytes
    status: bytes
    payload: bytes


class AckView(NamedTuple):
    """An ACK as a DEALER received it: ``ack_msgid`` is the msgid it acknowledges."""

    msgid: bytes
    ack_msgid: bytes


class StoredRequest(NamedTuple):
    """A REQUEST's frames as its client sent them (what the router keeps per job)."""

    msgid: bytes
    queue: bytes
    headers: bytes
    body: bytes


RoutedView = RequestView | BatchView | ReadyView | DoneView

#: Plain-tuple forms of the views, in the same order, for the hot paths.
RequestFields = tuple[bytes, bytes, bytes, bytes, bytes]
BatchFields = tuple[bytes, bytes, bytes]
DoneFields = tuple[bytes, bytes, bytes, bytes, bytes]

#: Frames (identity included) of each message :func:`routed` gives a view of.
ROUTED_LENGTHS: Final = {_REQUEST: 8, _BATCH: 6, _READY: 5, _DONE: 8}

# The hot paths use the *_fields functions: they give the view's fields as a plain
# tuple the caller unpacks into named locals. Measured (benchmarks/frame_views.py),
# building a NamedTuple costs more than all the indexing it replaces; a plain tuple
# unpacked costs about what indexing did.


def request_fields(raw: Sequence[bytes]) -> RequestFields | None:
    """``(identity, msgid, queue, headers, body)`` of a REQUEST a ROUTER received, or None."""
    if len(raw) == 8:
        identity, empty, version, command, msgid, queue, headers, body = raw
        if command == _REQUEST and version == _VERSION and not empty:
            return (identity, msgid, queue, headers, body)
    return None


def batch_fields(raw: Sequence[bytes]) -> BatchFields | None:
    """``(identity, msgid, jobs)`` of a BATCH a ROUTER received, or None."""
    if len(raw) == 6:
        identity, empty, version, command, msgid, jobs = raw
        if command == _BATCH and version == _VERSION and not empty:
            return (identity, msgid, jobs)
    return None


def done_fields(raw: Sequence[bytes]) -> DoneFields | None:
    """``(identity, msgid, job_msgid, status, payload)`` of a DONE a ROUTER received, or None."""
    if len(raw) == 8:
        identity, empty, version, command, msgid, job_msgid, status, payload = raw
        if command == _DONE and version == _VERSION and not empty:
            return (identity, msgid, job_msgid, status, payload)
    return None


def ready_identity(raw: Sequence[bytes]) -> bytes | None:
    """Who sent a READY a ROUTER received, or None if ``raw`` is not one."""
    if len(raw) == 5:
        identity, empty, version, command, _msgid = raw
        if command == _READY and version == _VERSION and not empty:
            return identity
    return None


def acked_msgid(frames: Sequence[bytes]) -> bytes | None:
    """The msgid an ACK a DEALER received acknowledges, or None if it is not one."""
    if len(frames) == 5:
        empty, version, command, _msgid, ack_msgid = frames
        if command == _ACK and version == _VERSION and not empty:
            return ack_msgid
    return None


def is_ack(frames: Sequence[bytes]) -> bool:
    """An ACK a DEALER received, plain or packed (a packed REQUEST is ACKed packed),
    told without decoding it (a client skips the ACKs nobody waits for)."""
    n = len(frames)
    if n == 5:
        empty, version, command, _msgid, _ack_msgid = frames
        return command == _ACK and version == _VERSION and not empty
    return n == 1 and _last(frames).startswith(_PACKED_ACK_HEAD)


def published_fields(frames: Sequence[bytes]) -> tuple[bytes, bytes] | None:
    """``(topic, data)`` of a message a SUB socket received from the publisher
    (:func:`published_frames`), or None when it is not two frames."""
    if len(frames) == 2:
        topic, data = frames
        return (topic, data)
    return None


def published_frames(topic: bytes, data: bytes) -> list[bytes]:
    """What the publisher's PUB socket sends for a PUBLISH: ``[TOPIC, JSON]``
    (no eMQP envelope: a SUB socket filters on the first frame's prefix)."""
    return [topic, data]


def routed(raw: Sequence[bytes]) -> RoutedView | None:
    """The view of what a ROUTER received, or None: not one of the views'
    commands, or not well-formed (:func:`refusal` says why)."""
    n = len(raw)
    fields: tuple[bytes, ...] | None
    if n == 8:
        fields = request_fields(raw)
        if fields is not None:
            return _new(RequestView, fields)
        fields = done_fields(raw)
        return None if fields is None else _new(DoneView, fields)
    if n == 6:
        fields = batch_fields(raw)
        return None if fields is None else _new(BatchView, fields)
    identity = ready_identity(raw)
    return None if identity is None else _new(ReadyView, (identity, raw[4]))


def routed_view(raw: Sequence[bytes]) -> RoutedView:
    """:func:`routed`, raising :class:`ProtocolError` with the :func:`refusal`."""
    view = routed(raw)
    if view is None:
        raise ProtocolError(refusal(raw), raw)
    return view


def dealer_ack(frames: Sequence[bytes]) -> AckView | None:
    """The ACK a DEALER received, or None (anything else: decode it)."""
    if acked_msgid(frames) is None:
        return None
    return _new(AckView, frames[3:])


def refusal(raw: Sequence[bytes], *, identity: bool = True) -> str:
    """Why :func:`routed` (``identity``) or :func:`dealer_ack` gave no view of ``raw``."""
    frames = raw[1:] if identity else raw
    if len(frames) < 4:
        return f"too short: {len(frames)} frame(s), a message has at least 4"
    empty, version, command = frames[:3]
    if empty:
        return f"frame 0 must be empty, got {empty[:60]!r}"
    if version != _VERSION:
        return f"unsupported protocol version {version[:60]!r}, expected {C.PROTOCOL_VERSION}"
    lengths = ROUTED_LENGTHS if identity else {_ACK: 5}
    want = lengths.get(command)
    if want is None:
        return f"no view of command {command[:60]!r} (decode it)"
    got = len(raw)
    return f"{command.decode()}: expected {want} frame(s), got {got}"


def request_frames(msgid: bytes, queue: bytes, headers: bytes, body: bytes) -> list[bytes]:
    """The frames a DEALER sends for a REQUEST with these fields."""
    return [b"", _VERSION, _REQUEST, msgid, queue, headers, body]


def stored_request(frames: Sequence[bytes]) -> StoredRequest:
    """The fields of :func:`request_frames` (ProtocolError if they are not a REQUEST's)."""
    if len(frames) != 7:
        raise ProtocolError(f"REQUEST: expected 7 frame(s), got {len(frames)}", frames)
    _empty, _version, _command, msgid, queue, headers, body = frames
    return _new(StoredRequest, (msgid, queue, headers, body))


def unpack_received(frames: list[bytes], *, max_frames: int) -> list[bytes]:
    """A packed message as received (``[identity, PACKED]`` or ``[PACKED]``, see
    :mod:`.packed`) as the frames it carries; one that is not well-formed is left
    as it is (decoding it says why)."""
    try:
        inner = unpack(_last(frames), max_frames=max_frames)
    except ProtocolError:
        return frames
    if len(frames) == 1:
        return inner
    inner.insert(0, identity_of(frames))
    return inner


def batch_frames(msgid: bytes, jobs: bytes) -> list[bytes]:
    """The frames a DEALER sends for a BATCH (``jobs``: its JOBS frame)."""
    return [b"", _VERSION, _BATCH, msgid, jobs]


def ack_frames(msgid: bytes, ack_msgid: bytes) -> list[bytes]:
    """The frames of an ACK of ``ack_msgid`` (as a DEALER gets them)."""
    return [b"", _VERSION, _ACK, msgid, ack_msgid]
