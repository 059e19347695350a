"""QUEUED (our extension): a job manager names the jobs it holds and has not started."""

from __future__ import annotations

import pytest

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import Queued, decode, encode
from django_eventmq.protocol.features import ROUTER_FEATURES


def test_round_trip_and_frames() -> None:
    message = Queued(msgid="q1", job_msgids=("a-1", "a-2"))
    assert encode(message) == [b"", b"eMQP/1.0", b"QUEUED", b"q1", b'["a-1","a-2"]']
    assert decode(encode(message)) == message


def test_our_router_announces_it() -> None:
    assert ROUTER_FEATURES["queued"] == 1


@pytest.mark.parametrize(
    ("body", "reason"),
    [(b"not json", "not JSON"), (b'{"a": 1}', "JSON list"), (b'["ok", ""]', "non-empty"),
     (b'["ok", 3]', "non-empty"), (b"[null]", "non-empty")],
)  # fmt: skip
def test_bad_bodies_are_refused(body: bytes, reason: str) -> None:
    with pytest.raises(ProtocolError, match=reason):
        decode([b"", b"eMQP/1.0", b"QUEUED", b"q1", body])


def test_wrong_frame_count_is_refused() -> None:
    with pytest.raises(ProtocolError, match="expected 1 frame"):
        decode([b"", b"eMQP/1.0", b"QUEUED", b"q1", b"[]", b"[]"])
