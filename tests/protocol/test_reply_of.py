"""reply_of (a client's fast path for a job's outcome) gives what decode gives, or None
for anything it does not take, which decode then reads or refuses as ever."""

from __future__ import annotations

import pytest

from django_eventmq.protocol import Reply, decode, encode
from django_eventmq.protocol.codec import reply_of
from django_eventmq.protocol.packed import pack

REPLY = encode(Reply(msgid="m-2", payload='{"value":1}', reply_to="m-1"))


def test_a_reply_to_a_job_is_what_decode_gives() -> None:
    assert (
        reply_of(REPLY)
        == decode(REPLY)
        == Reply(msgid="m-2", payload='{"value":1}', reply_to="m-1")
    )


@pytest.mark.parametrize(
    "frames",
    [
        encode(Reply(msgid="m-2", payload="m-1")),  # the reference's receipt: no reply_to
        [pack(REPLY)],
        [b"x", *REPLY[1:]],
        [REPLY[0], b"eMQP/0.9", *REPLY[2:]],
        [*REPLY[:2], b"ACK", *REPLY[3:]],
        [*REPLY[:3], b"", *REPLY[4:]],  # empty msgid
        [*REPLY[:4], b"\xff", REPLY[5]],  # not UTF-8
        [*REPLY[:5], b"\xc3"],
        [*REPLY, b"extra"],
    ],
)
def test_anything_else_is_left_to_decode(frames: list[bytes]) -> None:
    assert reply_of(frames) is None
