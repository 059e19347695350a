"""Packed messages: one eMQP message's frames carried in one frame (our extension).

A packed message is :func:`~.fields.join_fields` of the frames a DEALER would
send, ``['', 'eMQP/1.0', COMMAND, MSGID, *body]``, so it always starts with
``0,8,`` (the lengths of the empty frame and of the version). A ROUTER sees
it as ``[identity, PACKED]``, a DEALER as ``[PACKED]``: no eMQP message has so
few frames, so the two forms cannot be confused. Unpacked, it is exactly the
message it packs and goes through the same checks.

Why: every ZeroMQ frame costs a Python peer a call into libzmq on each side
(and a ``RCVMORE`` query when receiving). Measured on the 2-core machine,
one DEALER sending a REQUEST's 7 frames manages about 52,000 messages/s; the
same bytes in one frame about 300,000/s; unpacking costs about 2 us.

Who sends it (only to a peer that said it reads it; the reference's peers
never see one):

- a client of ours sends packed REQUESTs once our router's FEATURES answer
  said ``"packed"``; our router ACKs a packed REQUEST with a packed ACK;
- our router hands jobs out packed to a job manager whose FEATURES said
  ``"packed"``, and our job manager packs its DONEs to a router whose
  FEATURES said so.

Every receiver of ours takes both forms from anyone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import pairwise

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import constants as C
from django_eventmq.protocol.fields import MAX_DIGITS, field_bounds, join_fields

#: The FEATURES key that says "send me packed messages, I read them".
PACKED = "packed"
#: How every packed eMQP message starts: the lengths of '' and 'eMQP/1.0'.
PREFIX = b"0,%d," % len(C.PROTOCOL_VERSION_B)

_HEAD_REQUEST = b"0,%d,%d," % (len(C.PROTOCOL_VERSION_B), len(C.REQUEST))
_REQUEST_START = C.PROTOCOL_VERSION_B + C.REQUEST_B
#: :func:`pack_request`'s frame as one format: a single ``%`` is cheaper than
#: formatting the lengths and joining the parts.
_REQUEST_FORMAT = (
    _HEAD_REQUEST.replace(b"%", b"%%")
    + b"%d,%d,%d,%d\n"
    + _REQUEST_START.replace(b"%", b"%%")
    + b"%b%b%b%b"
)


def pack(frames: Sequence[bytes]) -> bytes:
    """One frame holding a message's ``frames`` (as a DEALER sends them)."""
    return join_fields(frames)


def pack_request(msgid: bytes, queue: bytes, headers: bytes, body: bytes) -> bytes:
    """:func:`pack` of a REQUEST's frames, built directly (the ``.delay()`` hot path)."""
    return _REQUEST_FORMAT % (
        len(msgid),
        len(queue),
        len(headers),
        len(body),
        msgid,
        queue,
        headers,
        body,
    )


def unpack(frame: bytes, *, max_frames: int) -> list[bytes]:
    """The frames a packed message carries; :class:`ProtocolError` saying why if
    ``frame`` is not one (UTF-8 and each command's rules are checked later, as
    for any message)."""
    if not frame.startswith(PREFIX):
        raise ProtocolError(
            f"a one-frame message must be a packed eMQP message (starting {PREFIX.decode()!r})"
        )
    ends = field_bounds(frame, what="packed message", max_fields=max_frames)
    return [frame[a:b] for a, b in pairwise(ends)]


#: A packed message's head and first fields, each length 0 or up to MAX_DIGITS
#: digits without a leading zero: the hot paths (:func:`request_of`, :func:`done_of`).
_LENGTH = rb"(0|[1-9][0-9]{0,%d})" % (MAX_DIGITS - 1)


def _head(command: bytes, fields: int) -> re.Pattern[bytes]:
    """How a packed ``command`` carrying ``fields`` frames after the command (its
    msgid among them) starts: the head, then the version and command bytes."""
    start = b"0,%d,%d," % (len(C.PROTOCOL_VERSION_B), len(command))
    return re.compile(
        re.escape(start)
        + rb",".join([_LENGTH] * fields)
        + rb"\n"
        + re.escape(C.PROTOCOL_VERSION_B + command)
    )


_REQUEST_HEAD = _head(C.REQUEST_B, 4)
_DONE_HEAD = _head(C.DONE_B, 4)


def _four_fields(head: re.Pattern[bytes], frame: bytes) -> tuple[bytes, bytes, bytes, bytes] | None:
    """The four fields of a packed message whose head ``head`` matches, or None."""
    match = head.match(frame)
    if match is None:
        return None
    a = match.end()
    first, second, third, fourth = map(int, match.groups())
    b = a + first
    c = b + second
    d = c + third
    if d + fourth != len(frame):
        return None
    return frame[a:b], frame[b:c], frame[c:d], frame[d:]


def request_of(frame: bytes) -> tuple[bytes, bytes, bytes, bytes] | None:
    """``(msgid, queue, headers, body)`` of a packed REQUEST, or None for anything
    else (:func:`unpack` then reads it, and refuses it as it would have, or finds
    it is some other message).

    The router's hot path: one frame straight to its fields, without the frame
    list ``unpack`` builds. It takes a subset of what ``unpack`` takes and gives
    the same fields: four lengths of ASCII digits without a leading zero (at most
    :data:`.fields.MAX_DIGITS` each), adding up to the frame. What the fields
    hold (UTF-8, an empty msgid) is the caller's to check, as after ``unpack``.
    """
    return _four_fields(_REQUEST_HEAD, frame)


def done_of(frame: bytes) -> tuple[bytes, bytes, bytes, bytes] | None:
    """``(msgid, job_msgid, status, payload)`` of a packed DONE, or None: as
    :func:`request_of`, for the DONE a job manager sends alone (low load)."""
    return _four_fields(_DONE_HEAD, frame)
