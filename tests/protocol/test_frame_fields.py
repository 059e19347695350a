"""Frame views: the reference's real frames give the right view (or none), with the
fields ``decode`` finds; malformed frames get no view and a refusal that says why."""

from __future__ import annotations

import re

import pytest

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import Ack, Ready, Request, decode
from django_eventmq.protocol import constants as C
from django_eventmq.protocol.batch import BATCH, pack_jobs
from django_eventmq.protocol.extensions import DONE
from django_eventmq.protocol.frame_fields import (
    AckView,
    BatchView,
    DoneView,
    ReadyView,
    RequestView,
    ack_frames,
    acked_msgid,
    batch_fields,
    dealer_ack,
    done_fields,
    identity_of,
    is_ack,
    published_fields,
    published_frames,
    ready_identity,
    refusal,
    request_fields,
    request_frames,
    routed,
    routed_view,
    stored_request,
    unpack_received,
)
from django_eventmq.protocol.headers import (
    attempt_of,
    parse_headers,
    with_attempt,
    with_reply_requested,
)
from django_eventmq.protocol.packed import pack
from tests.protocol.test_vectors import _load

V = C.PROTOCOL_VERSION_B


#: Every captured message a ROUTER received (identity first) or a DEALER received.
ROUTED = [
    pytest.param([f.encode() for f in frames], id=f"{key}[{i}]")
    for key, messages in _load().items()
    for i, frames in enumerate(messages)
    if frames[0] != ""
]
DEALT = [
    pytest.param([f.encode() for f in frames], id=f"{key}[{i}]")
    for key, messages in _load().items()
    for i, frames in enumerate(messages)
    if frames[0] == ""
]


@pytest.mark.parametrize("raw", ROUTED)
def test_reference_frames_routed(raw: list[bytes]) -> None:
    message = decode(raw[1:])
    view = routed(raw)
    # The hot paths' plain tuples are the views' fields, in order.
    fields = request_fields(raw) or done_fields(raw) or batch_fields(raw)
    assert (view[:] if view is not None and not isinstance(view, ReadyView) else None) == fields
    assert ready_identity(raw) == (view.identity if isinstance(view, ReadyView) else None)
    if isinstance(message, Request):
        assert isinstance(view, RequestView)
        assert view.identity == raw[0]
        assert view.msgid.decode() == message.msgid
        assert view.queue.decode() == message.queue
        assert parse_headers(view.headers.decode()) == message.headers
        assert view.frames() == raw[1:]
        assert stored_request(view.frames()) == view[1:]
    elif isinstance(message, Ready):
        assert view == ReadyView(raw[0], message.msgid.encode())
    else:
        assert view is None  # decoded the ordinary way
        with pytest.raises(ProtocolError, match="no view of command"):
            routed_view(raw)


@pytest.mark.parametrize("raw", DEALT)
def test_reference_frames_dealt(raw: list[bytes]) -> None:
    message = decode(raw)
    view = dealer_ack(raw)
    assert is_ack(raw) is isinstance(message, Ack)
    if isinstance(message, Ack):
        assert view == AckView(message.msgid.encode(), message.ack_msgid.encode())
        assert acked_msgid(raw) == view.ack_msgid
    else:
        assert view is None
        assert acked_msgid(raw) is None
        assert "no view of command" in refusal(raw, identity=False)


def test_batch_and_done_views() -> None:
    jobs = pack_jobs([(b"j1", b"q", b"", b"[]")])
    assert routed([b"id", b"", V, C.BATCH_B, b"b1", jobs]) == BatchView(b"id", b"b1", jobs)
    done = [b"id", b"", V, C.DONE_B, b"m", b"job", b"ok", b"{}"]
    assert routed_view(done) == DoneView(b"id", b"m", b"job", b"ok", b"{}")


def test_byte_constants_match_the_command_names() -> None:
    assert BATCH.encode() == C.BATCH_B
    assert DONE.encode() == C.DONE_B
    assert (C.ACK_B, C.REQUEST_B, C.READY_B) == (b"ACK", b"REQUEST", b"READY")


REQUEST = [b"id", b"", V, C.REQUEST_B, b"m", b"q", b"", b"[]"]

MALFORMED = [
    pytest.param([b"id"], "too short", id="identity-only"),
    pytest.param([b"id", b"", V, C.READY_B], "too short", id="no-msgid"),
    pytest.param(REQUEST[:-1], "REQUEST: expected 8 frame(s), got 7", id="request-short"),
    pytest.param([*REQUEST, b"x"], "REQUEST: expected 8 frame(s), got 9", id="request-long"),
    pytest.param([b"id", b"", V, C.READY_B, b"m", b"x"], "READY: expected 5", id="ready-long"),
    pytest.param([b"id", b"", V, C.BATCH_B, b"b"], "BATCH: expected 6", id="batch-short"),
    pytest.param(
        [b"id", b"", b"eMQP/2.0", *REQUEST[3:]], "unsupported protocol version", id="version"
    ),
    pytest.param([b"id", b"x", *REQUEST[2:]], "frame 0 must be empty", id="delimiter"),
    pytest.param([b"id", b"", V, b"FROB", b"m", b"q", b"", b"[]"], "FROB", id="unknown"),
]


@pytest.mark.parametrize(("raw", "reason"), MALFORMED)
def test_malformed_frames_are_refused(raw: list[bytes], reason: str) -> None:
    assert routed(raw) is None
    assert request_fields(raw) is None
    assert batch_fields(raw) is None
    assert done_fields(raw) is None
    assert ready_identity(raw) is None
    assert reason in refusal(raw)
    with pytest.raises(ProtocolError, match=re.escape(reason)) as caught:
        routed_view(raw)
    assert caught.value.frames == tuple(raw)


def test_malformed_ack_is_refused() -> None:
    ack = [b"", V, C.ACK_B, b"m", b"acked"]
    assert acked_msgid(ack) == b"acked"
    assert dealer_ack(ack[:-1]) is None
    assert "ACK: expected 5 frame(s), got 4" in refusal(ack[:-1], identity=False)
    assert dealer_ack([b"", b"eMQP/0.9", *ack[2:]]) is None
    assert dealer_ack([b"x", *ack[1:]]) is None


def test_stored_request_refuses_other_frames() -> None:
    assert stored_request(request_frames(b"m", b"q", b"h", b"b")).headers == b"h"
    with pytest.raises(ProtocolError, match="expected 7"):  # a routed one has 8
        stored_request(REQUEST)


def test_unpack_received_takes_packed_messages_both_ways() -> None:
    inner = request_frames(b"m", b"q", b"", b"[]")
    assert unpack_received([b"id", pack(inner)], max_frames=32) == [b"id", *inner]
    assert unpack_received([pack(inner)], max_frames=32) == inner
    bad = [b"id", b"not packed"]
    assert unpack_received(bad, max_frames=32) is bad
    assert identity_of(bad) == b"id"


def test_is_ack_knows_an_ack_plain_or_packed_and_nothing_else() -> None:
    ack = ack_frames(b"m1", b"job-1")
    assert is_ack(ack) and is_ack([pack(ack)])
    reply = [b"", V, b"REPLY", b"m2", b"", b"{}"]
    assert not is_ack(reply) and not is_ack([pack(reply)])
    assert not is_ack(ack[:4])  # an ACK without the msgid it acknowledges: decode it
    assert not is_ack([b"x", *ack[1:]])  # no empty delimiter
    assert not is_ack([b"", b"eMQP/0.9", *ack[2:]])
    assert not is_ack([])


def test_published_fields_take_what_published_frames_make() -> None:
    frames = published_frames(b"news.sport", b'{"score": 1}')
    assert published_fields(frames) == (b"news.sport", b'{"score": 1}')
    assert published_fields([b"news"]) is None
    assert published_fields([*frames, b"extra"]) is None


@pytest.mark.parametrize(
    ("headers", "attempt", "expected"),
    [
        (b"guarantee", 1, b"guarantee"),
        (b"guarantee", 3, b"guarantee,attempt:3"),
        (b"attempt:2,nohaste", 4, b"nohaste,attempt:4"),
        (b"attempt:2", 1, b""),
        (b"", 2, b"attempt:2"),
    ],
)
def test_with_attempt_replaces_the_header(headers: bytes, attempt: int, expected: bytes) -> None:
    written = with_attempt(headers, attempt)
    assert written == expected
    assert attempt_of(parse_headers(written.decode())) == attempt


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (b"", b"reply-requested"),
        (b"guarantee,timeout:3", b"guarantee,timeout:3,reply-requested"),
        (b"reply-requested,guarantee", b"reply-requested,guarantee"),
        (b"guarantee, reply-requested", b"guarantee, reply-requested"),
    ],
)
def test_with_reply_requested_asks_for_a_reply_once(headers: bytes, expected: bytes) -> None:
    written = with_reply_requested(headers)
    assert written == expected
    assert parse_headers(written.decode()).reply_requested
