"""UNREADY (our extension): a job manager takes back free slots it announced."""

from __future__ import annotations

import pytest

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import Unready, decode, encode


def test_round_trip_and_frames() -> None:
    message = Unready(msgid="u1", count=6)
    assert encode(message) == [b"", b"eMQP/1.0", b"UNREADY", b"u1", b"6"]
    assert decode(encode(message)) == message


@pytest.mark.parametrize(
    ("count", "reason"),
    [(b"0", "whole number >= 1"), (b"-1", "not a whole number"), (b"two", "not a whole number"),
     (b"", "not a whole number"), ("\uff13".encode(), "not a whole number"),
     (b"1" * 10, "not a whole number"), (b"1.5", "not a whole number")],
)  # fmt: skip
def test_bad_counts_are_refused(count: bytes, reason: str) -> None:
    with pytest.raises(ProtocolError, match=reason):
        decode([b"", b"eMQP/1.0", b"UNREADY", b"u1", count])


def test_wrong_frame_count_is_refused() -> None:
    with pytest.raises(ProtocolError, match="expected 1 frame"):
        decode([b"", b"eMQP/1.0", b"UNREADY", b"u1", b"1", b"2"])


@pytest.mark.parametrize("count", [0, -3, True, 1.0, "2"])
def test_bad_count_fails_at_construction(count: object) -> None:
    with pytest.raises(ProtocolError, match="UNREADY: count"):
        Unready(msgid="u1", count=count)  # type: ignore[arg-type]
