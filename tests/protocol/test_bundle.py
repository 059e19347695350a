"""Bundles (protocol/bundle.py): many eMQP messages in one frame."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import Done, Ready, Request, decode, encode
from django_eventmq.protocol.bundle import (
    BUNDLE,
    MAX_BUNDLE_MESSAGES,
    bundle,
    is_bundle,
    runs,
    size_bound,
    unbundle,
)
from django_eventmq.protocol.features import JOBMANAGER_FEATURES, ROUTER_FEATURES
from django_eventmq.protocol.limits import MAX_MESSAGE_BYTES
from django_eventmq.protocol.packed import PREFIX as PACKED_PREFIX
from django_eventmq.protocol.packed import pack
from tests.protocol.test_vectors import CASES, _strip_identity

V = b"eMQP/1.0"

_frames = st.lists(st.binary(max_size=200), min_size=1, max_size=32)


@given(st.lists(_frames, min_size=1, max_size=40))
def test_any_messages_come_back_as_they_were_bundled(messages: list[list[bytes]]) -> None:
    frame = bundle(messages)
    assert is_bundle(frame)
    assert unbundle(frame) == messages
    assert unbundle(frame, [b"peer"]) == [[b"peer", *m] for m in messages]


def test_every_reference_message_decodes_the_same_from_a_bundle() -> None:
    messages = [_strip_identity(case.values[1]) for case in CASES]
    frame = bundle(messages)
    assert frame.decode()  # text, like every eMQP frame
    assert [decode(m) for m in unbundle(frame)] == [decode(m) for m in messages]


def test_a_bundle_is_neither_a_packed_message_nor_a_multi_frame_one() -> None:
    done = encode(Done(msgid="d-1", job_msgid="j-1", status="ok", payload="null"))
    frame = bundle([done, done])
    assert not frame.startswith(PACKED_PREFIX)
    assert not is_bundle(pack(done))
    with pytest.raises(ProtocolError, match="must be a packed eMQP message"):
        decode([frame])  # a receiver that does not read bundles refuses it whole
    with pytest.raises(ProtocolError, match="must start with 'B'"):
        unbundle(pack(done))


def test_the_features_key_is_announced_by_our_router_and_job_manager() -> None:
    # The value: the most bytes of one frame the announcer takes (see test_bundle_bytes.py).
    assert ROUTER_FEATURES[BUNDLE] == MAX_MESSAGE_BYTES
    assert JOBMANAGER_FEATURES[BUNDLE] == MAX_MESSAGE_BYTES


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (b"", "must start with 'B'"),
        (b"0,8,4,1\n", "must start with 'B'"),
        (b"B1,1,3", "no head"),
        (b"B\nabc", "comma-separated decimal numbers, got b''"),
        (b"B1,1,x\nabc", "comma-separated decimal numbers"),
        (b"B1,1,+3\nabc", "comma-separated decimal numbers"),
        (b"B1,1,,3\nabc", "comma-separated decimal numbers"),
        (b"B1,1,03\nabc", "comma-separated decimal numbers"),
        (b"B0\n", "carries 1 to 1000 messages, says 0"),
        (b"B1001" + b",1" * 1001 + b",0" * 1001 + b"\n", "carries 1 to 1000 messages, says 1001"),
        (b"B2,1\n", "says 2 messages, the head counts frames of 1"),
        (b"B1,0\n", "a message must have 1 to 32 frames"),
        (b"B2,1,33" + b",0" * 34 + b"\n", "a message must have 1 to 32 frames"),
        (b"B1,2,3\nabc", "its messages have 2 frames, the head has 1 lengths"),
        (b"B1,1,3,0\nabc", "its messages have 1 frames, the head has 2 lengths"),
        (b"B1,1,3\nab", "add up to 3 bytes, the frames take 2"),
        (b"B1,1,3\nabcd", "add up to 3 bytes, the frames take 4"),
    ],
)  # fmt: skip
def test_a_malformed_bundle_is_refused_saying_why(frame: bytes, reason: str) -> None:
    with pytest.raises(ProtocolError, match=reason):
        unbundle(frame)


def test_a_bundle_over_the_size_limit_is_refused() -> None:
    frame = bundle([[b"x" * 100], [b"y"]])
    with pytest.raises(ProtocolError, match="larger than 50 bytes"):
        unbundle(frame, max_bytes=50)
    with pytest.raises(ProtocolError, match=r"bytes, more than 50"):
        bundle([[b"x" * 100], [b"y"]], max_bytes=50)


@pytest.mark.parametrize("count", [0, MAX_BUNDLE_MESSAGES + 1])
def test_building_a_bundle_of_too_few_or_too_many_messages_is_refused(count: int) -> None:
    with pytest.raises(ProtocolError, match=f"carries 1 to 1000 messages, got {count}"):
        bundle([[b""]] * count)


def test_a_smaller_message_limit_is_kept_on_both_sides() -> None:
    with pytest.raises(ProtocolError, match="carries 1 to 2 messages, got 3"):
        bundle([[b"a"]] * 3, max_messages=2)
    with pytest.raises(ProtocolError, match="carries 1 to 2 messages, says 3"):
        unbundle(bundle([[b"a"]] * 3), max_messages=2)


def test_a_bundled_message_gets_the_checks_it_would_get_alone() -> None:
    """The bundle's structure is fine; what each message carries is its own business."""
    bad_version = [b"", b"eMQP/0.9", b"READY", b"r-1"]
    not_text = [b"", V, b"READY", b"\xff"]
    ready = encode(Ready(msgid="r-2"))
    messages = unbundle(bundle([bad_version, not_text, ready]))
    with pytest.raises(ProtocolError, match="unsupported protocol version"):
        decode(messages[0])
    with pytest.raises(ProtocolError, match="not valid UTF-8"):
        decode(messages[1])
    assert decode(messages[2]) == Ready(msgid="r-2")


def test_runs_keep_to_the_message_and_byte_limits_in_order() -> None:
    request = encode(Request(msgid="m-1", queue="default", body_text='["run", {"callable": "f"}]'))
    size = size_bound(request)
    assert runs([request] * 5) == [5]
    assert runs([request] * 5, max_messages=2) == [2, 2, 1]
    assert runs([request] * 5, max_bytes=2 * size + 20) == [2, 2, 1]
    # A message too big to share a bundle goes alone, between the others.
    big = [b"", V, b"REQUEST", b"x" * (3 * size)]
    assert runs([request, big, request, request], max_bytes=3 * size) == [1, 1, 2]
    assert runs([]) == []
    # What the limits allow really fits: every bundle built from a run is within them.
    for limit in (2 * size + 20, 3 * size, 3 * size + 20, 7 * size + 40):
        for taken in runs([request] * 7, max_bytes=limit):
            assert taken == 1 or len(bundle([request] * taken)) <= limit
