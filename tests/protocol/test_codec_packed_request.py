"""codec.packed_request: a packed REQUEST decoded straight from its fields (the job
manager's hot path). It must give what :func:`decode` gives for the same frame: the
same Request, or the same ProtocolError (reason and frames), and None for anything
:func:`decode` reads another way."""

from __future__ import annotations

import pytest

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import Ack, Headers, Heartbeat, Request, decode, encode
from django_eventmq.protocol.codec import packed_request
from django_eventmq.protocol.packed import pack, pack_request, unpack


def _decoded(frame: bytes) -> Request | ProtocolError:
    """What the generic path makes of ``frame``: unpacked, then decoded."""
    try:
        message = decode(unpack(frame, max_frames=32))
    except ProtocolError as exc:
        return exc
    assert isinstance(message, Request)
    return message


def _fast(frame: bytes) -> Request | ProtocolError | None:
    try:
        return packed_request(frame)
    except ProtocolError as exc:
        return exc


@pytest.mark.parametrize(
    "request_",
    [
        Request(msgid="m-1", queue="default", headers=Headers(), body_text='["run", {}]'),
        Request(
            msgid="m-2",
            queue="high",
            headers=Headers(reply_requested=True, retry_count=3, timeout=7),
            body_text='["run", {"args": ["é", 2]}]',
        ),
        Request(msgid="ü" * 300, queue="q", body_text=""),
    ],
)
def test_same_request_as_decode(request_: Request) -> None:
    frame = pack(encode(request_))
    got = packed_request(frame)
    assert got == request_ == _decoded(frame)
    assert type(got) is Request


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ((b"m\xff", b"q", b"", b"[]"), "not valid UTF-8"),
        ((b"m", b"q", b"", b"[\xe9]"), "not valid UTF-8"),
        ((b"\xff", b"q", b"", b"[\xe9\xe9]"), "not valid UTF-8"),  # the first bad one says
        ((b"m", b"q\xc3", b"", b"[]"), "not valid UTF-8"),
        ((b"", b"q", b"", b"[]"), "msgid"),
        ((b"m", b"", b"", b"[]"), "queue"),
        ((b"m", b"q", b"timeout,abc", b"[]"), "header"),
        ((b"m", b"q", b"retry-count,-1", b"[]"), "header"),
    ],
)
def test_same_refusal_as_decode(fields: tuple[bytes, ...], reason: str) -> None:
    frame = pack_request(*fields)
    fast, slow = _fast(frame), _decoded(frame)
    assert isinstance(slow, ProtocolError) and reason in slow.reason
    assert isinstance(fast, ProtocolError)
    assert (fast.reason, fast.frames) == (slow.reason, slow.frames)
    assert type(fast) is type(slow) and type(fast.__cause__) is type(slow.__cause__)


@pytest.mark.parametrize(
    "frame",
    [
        pack(encode(Ack(msgid="a", ack_msgid="b"))),
        pack(encode(Heartbeat(msgid="h", timestamp=1.0))),
        pack_request(b"m", b"q", b"", b"[]").replace(b",1,", b",01,", 1),  # decode refuses it
        pack_request(b"m", b"q", b"", b"[]") + b"x",
        b"B1\nx",
        b"",
    ],
)
def test_anything_else_is_left_to_decode(frame: bytes) -> None:
    assert packed_request(frame) is None
