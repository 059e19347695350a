"""Property-based tests of the decoder on mutated valid messages (hypothesis).

Random bytes rarely get past the envelope; mutating real messages (flipped
bytes, dropped, duplicated, truncated and inserted frames) reaches the body
parsers. Only ProtocolError may come out, and what is accepted re-encodes
to the same message.
"""

from __future__ import annotations

import contextlib
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import (
    DEFAULT_LIMITS,
    Ack,
    Headers,
    Heartbeat,
    Inform,
    JobBody,
    Publish,
    Reply,
    Request,
    Schedule,
    Unschedule,
    decode,
    encode,
    parse_job,
)
from django_eventmq.protocol.payload import _depth_exceeds, decode_json

JOB = JobBody(path="app.jobs", callable="send", args=(1, "x"), kwargs={"a": [1, {"b": None}]})

GUARANTEE = Headers(guarantee=True)
RETRY = Headers(retry_count=3, timeout=30)
REPLY = Headers(reply_requested=True)
SEEDS: list[list[bytes]] = [
    encode(Request(msgid="m1", queue="default", headers=GUARANTEE, body_text=JOB.encode())),
    encode(Request(msgid="m2", queue="q", headers=RETRY, body_text="{}")),
    encode(Schedule(msgid="s", queue="q", body_text=JOB.encode(), interval=60)),
    encode(Schedule(msgid="c", queue="q", body_text=JOB.encode(), cron="*/5 * * * *")),
    encode(Unschedule(msgid="u", queue="q", body_text=JOB.encode())),
    encode(Inform(msgid="i", queues=((10, "default"), (5, "email")))),
    encode(Reply(msgid="r", payload='{"value": 1}', reply_to="m1")),
    encode(Heartbeat(msgid="h", timestamp=1700000000.5)),
    encode(Ack(msgid="a", ack_msgid="m1")),
    encode(Publish(msgid="p", topic="t", body_text='{"x": 1}', headers=Headers())),
]


@st.composite
def mutated(draw: st.DrawFn) -> list[bytes]:
    frames = list(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "drop", "dup", "cut", "insert", "replace"]))
        if not frames:
            frames.append(b"")
        i = draw(st.integers(0, len(frames) - 1))
        if op == "flip" and frames[i]:
            j = draw(st.integers(0, len(frames[i]) - 1))
            b = bytearray(frames[i])
            b[j] ^= draw(st.integers(1, 255))
            frames[i] = bytes(b)
        elif op == "drop":
            del frames[i]
        elif op == "dup":
            frames.insert(i, frames[i])
        elif op == "cut":
            frames[i] = frames[i][: draw(st.integers(0, len(frames[i])))]
        elif op == "insert":
            frames.insert(i, draw(st.binary(max_size=40)))
        else:
            frames[i] = draw(
                st.sampled_from([b"", b"-1", b"NaN", b"1e309", b"[[", b"retry-count:-1",
                                 b"timeout:99999999999", b'["run",{}]', b"\xff", b"worker"])
            )  # fmt: skip
    return frames


def _check(frames: list[bytes], admin: bool) -> None:
    try:
        message = decode(frames, admin=admin)
    except ProtocolError as exc:
        assert exc.frames == tuple(frames)
        return
    again = decode(encode(message), admin=admin)
    assert decode(encode(again), admin=admin) == again
    with contextlib.suppress(ProtocolError):
        DEFAULT_LIMITS.check_message(message)
    if isinstance(message, Request):
        with contextlib.suppress(ProtocolError):
            parse_job(message.body_text)


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(mutated(), st.booleans())
def test_mutated_messages_decode_or_raise_protocol_error(frames: list[bytes], admin: bool) -> None:
    _check(frames, admin)


@settings(max_examples=500)
@given(st.lists(st.binary(max_size=200), max_size=40), st.booleans())
def test_random_frames_decode_or_raise_protocol_error(frames: list[bytes], admin: bool) -> None:
    _check(frames, admin)


@settings(max_examples=300)
@given(st.text(max_size=300))
def test_job_bodies_parse_or_raise_invalid_job(text: str) -> None:
    for candidate in (text, f'["run",{text}]', f'["run",{{"path":"a","callable":{text}}}]'):
        try:
            body = parse_job(candidate)
        except ProtocolError:
            continue
        assert parse_job(body.encode()) == body


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"a', max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=30,
)


@settings(max_examples=400)
@given(JSON_VALUES, st.integers(1, 12), st.booleans())
def test_the_depth_limit_agrees_with_a_walk_over_the_value(
    value: object, limit: int, as_bytes: bool
) -> None:
    """decode_json skips the walk when the text has too few brackets to be deep:
    its verdict must still be the walk's (strings full of brackets included)."""
    text = json.dumps(value)
    try:
        decode_json(text.encode() if as_bytes else text, max_depth=limit)
        refused = False
    except ProtocolError as exc:
        assert "nested deeper" in str(exc)
        refused = True
    assert refused == _depth_exceeds(value, limit)
