"""codec.packed_request and codec.plain_request: a REQUEST decoded straight from its
fields (the job manager's hot paths: a packed REQUEST alone, a job's plain frames in
a bundle). Each must give what :func:`decode` gives for the same frames: the same
Request, or the same ProtocolError (reason and frames), and None for anything
:func:`decode` reads another way."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import Ack, Headers, Heartbeat, Request, decode, encode
from django_eventmq.protocol.codec import packed_request, plain_request
from django_eventmq.protocol.frame_fields import request_frames
from django_eventmq.protocol.packed import pack, pack_request, unpack

#: How a job comes: (its frames from a REQUEST's frames, the fast path, the frames decode reads).
Form = tuple[
    Callable[[list[bytes]], list[bytes]],
    Callable[[list[bytes]], Request | None],
    Callable[[list[bytes]], list[bytes]],
]
PACKED: Form = (
    lambda frames: [pack(frames)],
    lambda frames: packed_request(frames[0]),
    lambda frames: unpack(frames[0], max_frames=32),
)
PLAIN: Form = (lambda frames: frames, plain_request, lambda frames: frames)
FORMS = pytest.mark.parametrize("form", [PACKED, PLAIN], ids=["packed", "plain"])


def _decoded(form: Form, frames: list[bytes]) -> Request | ProtocolError:
    """What the generic path makes of ``frames``: unpacked if need be, then decoded."""
    try:
        message = decode(form[2](frames))
    except ProtocolError as exc:
        return exc
    assert isinstance(message, Request)
    return message


def _fast(form: Form, frames: list[bytes]) -> Request | ProtocolError | None:
    try:
        return form[1](frames)
    except ProtocolError as exc:
        return exc


@FORMS
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
def test_same_request_as_decode(form: Form, request_: Request) -> None:
    frames = form[0](encode(request_))
    got = form[1](frames)
    assert got == request_ == _decoded(form, frames)
    assert type(got) is Request


@FORMS
@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ((b"m\xff", b"q", b"", b"[]"), "not valid UTF-8"),
        ((b"m", b"q", b"", b"[\xe9]"), "not valid UTF-8"),
        ((b"\xff", b"q", b"", b"[\xe9\xe9]"), "not valid UTF-8"),  # the first bad one says
        ((b"m", b"q\xc3", b"", b"[]"), "not valid UTF-8"),
        ((b"m", b"q", b"\xc3", b"[]"), "not valid UTF-8"),
        ((b"", b"q", b"", b"[]"), "msgid"),
        ((b"m", b"", b"", b"[]"), "queue"),
        ((b"m", b"q", b"timeout,abc", b"[]"), "header"),
        ((b"m", b"q", b"retry-count,-1", b"[]"), "header"),
    ],
)
def test_same_refusal_as_decode(
    form: Form, fields: tuple[bytes, bytes, bytes, bytes], reason: str
) -> None:
    frames = form[0](request_frames(*fields))
    fast, slow = _fast(form, frames), _decoded(form, frames)
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
def test_anything_else_packed_is_left_to_decode(frame: bytes) -> None:
    assert packed_request(frame) is None


_OK = request_frames(b"m", b"q", b"", b"[]")


@pytest.mark.parametrize(
    "frames",
    [
        encode(Ack(msgid="a", ack_msgid="b")),
        encode(Heartbeat(msgid="h", timestamp=1.0)),
        [b"x", *_OK[1:]],  # frame 0 not empty: decode says so
        [b"", b"eMQP/2.0", *_OK[2:]],  # another version
        [*_OK[:2], b"REQUESTX", *_OK[3:]],  # another command
        [*_OK[:2], b"request", *_OK[3:]],
        _OK[:-1],  # a frame short
        [*_OK, b"extra"],  # a frame too many
        [pack(_OK)],  # packed: packed_request's
        [],
    ],
)
def test_anything_else_plain_is_left_to_decode(frames: list[bytes]) -> None:
    assert plain_request(frames) is None
