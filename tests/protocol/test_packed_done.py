"""packed.done_of: a packed DONE straight to its fields (the router's low-load path).

As request_of: it must take only what :func:`unpack` takes as a DONE and give the
same fields; anything else is None, and the router's slower path reads it."""

from __future__ import annotations

import pytest

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol.frame_fields import done_fields
from django_eventmq.protocol.packed import done_of, pack, pack_request, request_of, unpack
from tests.protocol.damage import damaged

FIELDS = (b"m-2", b"m-1", b"ok", b'{"result": 1}')


def _packed_done(*fields: bytes) -> bytes:
    return pack([b"", b"eMQP/1.0", b"DONE", *fields])


GOOD = _packed_done(*FIELDS)


def _slow(frame: bytes) -> tuple[bytes, ...] | None:
    """What the router's slow path reads from ``frame`` as a DONE's four fields."""
    try:
        frames = unpack(frame, max_frames=32)
    except ProtocolError:
        return None
    fields = done_fields([b"id", *frames])
    return None if fields is None else fields[1:]


@pytest.mark.parametrize(
    "fields",
    [
        FIELDS,
        (b"", b"", b"", b""),  # read, and refused later (no msgid, unknown status)
        (b"m" * 500, b"j" * 40, b"error", b"x" * 70000),
        (b"m\n", b"j,", b"ok\n", b"\xff"),  # bytes as they come; UTF-8 checked later
    ],
)
def test_same_fields_as_unpack(fields: tuple[bytes, ...]) -> None:
    frame = _packed_done(*fields)
    assert done_of(frame) == fields
    assert _slow(frame) == fields


@pytest.mark.parametrize(
    "frame",
    [
        GOOD.replace(b",3,", b",03,", 1),  # leading zero: unpack refuses it
        GOOD.replace(b",3,", b",,", 1),
        GOOD.replace(b",3,", b",+3,", 1),
        GOOD + b"x",  # the lengths do not add up
        GOOD[:-1],
        GOOD.replace(b"DONE", b"DONF", 1),
        GOOD.replace(b"eMQP/1.0", b"eMQP/2.0", 1),
        _packed_done(*FIELDS, b"extra"),
        _packed_done(*FIELDS[:3]),
        pack_request(*FIELDS),  # a REQUEST is not a DONE ...
        b"",
    ],
)
def test_anything_else_is_none(frame: bytes) -> None:
    assert done_of(frame) is None


def test_a_request_is_read_by_request_of_only() -> None:
    assert request_of(GOOD) is None  # ... nor a DONE a REQUEST
    assert request_of(pack_request(*FIELDS)) == FIELDS


def test_never_takes_what_unpack_would_not() -> None:
    """Random damage to a good frame: when done_of reads it, unpack reads the same."""
    for frame in damaged(GOOD, b"0123456789,\n eMQPDONEok{}x", seed=2121):
        got = done_of(frame)
        if got is not None:
            assert got == _slow(frame), frame
