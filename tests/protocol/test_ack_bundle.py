"""bundle.ack_bundle: the router's bundle of a commit's ACKs, built straight from
the msgids, is exactly :func:`bundle` of those ACKs, or None when they do not fit."""

from __future__ import annotations

import pytest

from django_eventmq.protocol.bundle import ack_bundle, bundle, runs, unbundle
from django_eventmq.protocol.frame_fields import ack_frames


def _acks(count: int, width: int = 1) -> tuple[list[bytes], list[bytes]]:
    return [b"n-%x" % i for i in range(count)], [b"job-%d" % i + b"x" * width for i in range(count)]


@pytest.mark.parametrize("count", [1, 2, 3, 999, 1000])
def test_same_bytes_as_bundle(count: int) -> None:
    ids, acked = _acks(count)
    messages = [ack_frames(new, msgid) for new, msgid in zip(ids, acked, strict=True)]
    frame = ack_bundle(ids, acked)
    assert frame == bundle(messages)
    assert unbundle(frame) == messages


def test_none_when_they_do_not_fit_one_bundle() -> None:
    ids, acked = _acks(1001)
    assert ack_bundle(ids, acked) is None  # more than MAX_BUNDLE_MESSAGES
    assert ack_bundle([], []) is None
    ids, acked = _acks(10, width=100)
    messages = [ack_frames(new, msgid) for new, msgid in zip(ids, acked, strict=True)]
    size = len(bundle(messages))
    assert ack_bundle(ids, acked, max_bytes=size) == bundle(messages)
    assert ack_bundle(ids, acked, max_bytes=size - 1) is None
    assert runs(messages, max_bytes=size - 1) != [10]
