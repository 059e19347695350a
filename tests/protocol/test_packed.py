"""Packed messages (protocol/packed.py): one frame carrying a message's frames."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import decode, encode
from django_eventmq.protocol.codec import MAX_FRAMES
from django_eventmq.protocol.packed import PREFIX, pack, pack_request, unpack
from tests.protocol.test_vectors import CASES, _strip_identity

V = b"eMQP/1.0"
BODY = b'["run",{"path":"app.jobs","callable":"f","args":["\xc3\xa9"],"kwargs":{}}]'


@given(st.lists(st.binary(max_size=300), min_size=2, max_size=MAX_FRAMES - 2))
def test_any_frames_come_back_as_they_were_packed(rest: list[bytes]) -> None:
    frames = [b"", V, *rest]
    packed = pack(frames)
    assert packed.startswith(PREFIX)
    assert unpack(packed, max_frames=MAX_FRAMES) == frames


@pytest.mark.parametrize(("key", "frames"), CASES)
def test_every_reference_message_decodes_the_same_packed(key: str, frames: list[str]) -> None:
    raw = _strip_identity(frames)
    assert decode([pack(raw)]) == decode(raw), key


def test_a_packed_request_is_built_as_pack_would_build_it() -> None:
    fields = (b"m-1", "émails".encode(), b"guarantee", BODY)
    assert pack_request(*fields) == pack([b"", V, b"REQUEST", *fields])
    message = decode([pack_request(*fields)])
    assert encode(message) == [b"", V, b"REQUEST", *fields]


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (b"hello", "must be a packed eMQP message"),
        (b"", "must be a packed eMQP message"),
        (b"0,8,7,3", "no head"),
        (b"0,8,x\neMQP/1.0", "comma-separated decimal lengths"),
        (b"0,8,+7\neMQP/1.0REQUEST", "comma-separated decimal lengths"),
        (b"0,8,,7\neMQP/1.0REQUEST", "comma-separated decimal lengths"),
        (b"0,8,7\neMQP/1.0REQUES", "add up to 15 bytes, the fields take 14"),
        (b"0,8,7\neMQP/1.0REQUESTS", "add up to 15 bytes, the fields take 16"),
        (b"0,8" + b",0" * 40 + b"\neMQP/1.0", "more than 32"),
    ],
)  # fmt: skip
def test_a_frame_that_is_not_a_packed_message_is_refused_saying_why(
    frame: bytes, reason: str
) -> None:
    with pytest.raises(ProtocolError, match=reason):
        unpack(frame, max_frames=MAX_FRAMES)
    with pytest.raises(ProtocolError, match=reason):
        decode([frame])  # decoding a one-frame message says the same


def test_a_packed_message_goes_through_the_checks_of_the_message_it_carries() -> None:
    with pytest.raises(ProtocolError, match="not valid UTF-8"):
        decode([pack([b"", V, b"REQUEST", b"m-1", b"q", b"", b"\xff"])])
    with pytest.raises(ProtocolError, match="unsupported protocol version"):
        decode([pack([b"", b"eMQP/0.9", b"REQUEST", b"m-1", b"q", b"", BODY])])
    with pytest.raises(ProtocolError, match="expected 3 frame"):
        decode([pack([b"", V, b"REQUEST", b"m-1", b"q"])])
