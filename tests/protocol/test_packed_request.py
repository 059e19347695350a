"""packed.request_of: a packed REQUEST straight to its fields (the router's hot path).

It must take only what :func:`unpack` takes as a REQUEST, and give the same fields;
anything else is None, so the router's slower path refuses it as before."""

from __future__ import annotations

import pytest

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol.frame_fields import request_fields
from django_eventmq.protocol.packed import pack, pack_request, request_of, unpack
from tests.protocol.damage import damaged

FIELDS = (b"m-1", b"default", b"", b'["run", {}]')
GOOD = pack_request(*FIELDS)


def _slow(frame: bytes) -> tuple[bytes, ...] | None:
    """What the router's slow path reads from ``frame`` as a REQUEST's four fields."""
    try:
        frames = unpack(frame, max_frames=32)
    except ProtocolError:
        return None
    fields = request_fields([b"id", *frames])
    return None if fields is None else fields[1:]


@pytest.mark.parametrize(
    "fields",
    [
        FIELDS,
        (b"m", b"q", b"high,1", b"[1]"),
        (b"", b"", b"", b""),  # empty fields: read, and refused later (empty msgid)
        (b"x" * 1234, b"q" * 10, b"h" * 100, b"[" + b"1" * 99999 + b"]"),
        (b"m\n", b"q,", b"0,1\n", b"[\xff]"),  # bytes as they come; UTF-8 checked later
    ],
)
def test_same_fields_as_unpack(fields: tuple[bytes, ...]) -> None:
    frame = pack_request(*fields)
    assert request_of(frame) == fields
    assert _slow(frame) == fields


@pytest.mark.parametrize(
    "frame",
    [
        GOOD.replace(b",3,", b",03,", 1),  # leading zero: unpack refuses it
        GOOD.replace(b",7,0,", b",7,00,", 1),
        GOOD.replace(b",3,", b",,", 1),  # an empty number
        GOOD.replace(b",3,", b",+3,", 1),  # not digits
        GOOD.replace(b",3,", b", 3,", 1),
        GOOD.replace(b",3,", b",\xd9\xa3,", 1),  # a non-ASCII digit
        GOOD + b"x",  # the lengths do not add up
        GOOD[:-1],
        GOOD.replace(b"REQUEST", b"REQUESX", 1),  # another command or version
        GOOD.replace(b"eMQP/1.0", b"eMQP/2.0", 1),
        GOOD.replace(b"0,8,7,", b"1,8,7,", 1),
        pack([b"", b"eMQP/1.0", b"REQUEST", b"m", b"q", b"", b"[1]", b"extra"]),
        pack([b"", b"eMQP/1.0", b"REQUEST", b"m", b"q", b""]),
        b"0,8,7,12345678901,1,1,1\n",  # more digits than any frame's length
        b"",
    ],
)
def test_anything_else_is_none(frame: bytes) -> None:
    assert request_of(frame) is None


def test_never_takes_what_unpack_would_not() -> None:
    """Random damage to a good frame: when request_of reads it, unpack reads the same."""
    for frame in damaged(GOOD, b"0123456789,\n eMQPREQUEST[]x", seed=21):
        got = request_of(frame)
        if got is not None:
            assert got == _slow(frame), frame
