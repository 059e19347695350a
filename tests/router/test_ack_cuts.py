"""CommitAcks._send_acks: a commit's ACKs to a client that reads bundles go as bundles
of at most MAX_BUNDLE_MESSAGES, in order, and one left alone goes in the form its
REQUEST came in (packed or plain); a client that does not read bundles gets each
ACK alone. The fast path (bundle.ack_bundle) keeps exactly what runs() cut."""

from __future__ import annotations

from collections import OrderedDict

import pytest

from django_eventmq.protocol.bundle import MAX_BUNDLE_MESSAGES, is_bundle, unbundle
from django_eventmq.protocol.frame_fields import ack_frames
from django_eventmq.protocol.packed import unpack
from django_eventmq.router.commit_acks import CommitAcks

BUNDLED = b"client-bundles"
PLAIN = b"client-plain"


class _Outbox:
    def __init__(self) -> None:
        self.sent: list[list[bytes]] = []

    def send_frames(self, frames: list[bytes]) -> bool:
        self.sent.append(frames)
        return True


def _commits() -> tuple[CommitAcks, _Outbox]:
    commits = object.__new__(CommitAcks)
    outbox = _Outbox()
    commits.outbox = outbox  # type: ignore[assignment]
    commits._bundle_clients = OrderedDict({BUNDLED: 1 << 26})
    return commits, outbox


def _acked(frames: list[bytes]) -> tuple[bytes, list[bytes]]:
    """(who, the msgids acknowledged) of one sent message, and that each is an ACK."""
    identity, *rest = frames
    if len(rest) == 1 and is_bundle(rest[0]):
        messages = unbundle(rest[0])
    elif len(rest) == 1:
        messages = [unpack(rest[0], max_frames=32)]
    else:
        messages = [rest]
    for message in messages:
        assert message[:3] == ack_frames(b"", b"")[:3]
    return identity, [message[4] for message in messages]


@pytest.mark.parametrize("count", [1, 2, 999, 1000, 1001, 2500])
def test_acks_of_a_commit_cut_by_max_bundle_messages(count: int) -> None:
    commits, outbox = _commits()
    acks = [(BUNDLED, b"job-%d" % i, i % 2 == 0) for i in range(count)]
    acks.insert(1, (PLAIN, b"plain-job", False))
    commits._send_acks(acks)
    sent = [_acked(frames) for frames in outbox.sent]
    assert sent[0] == (PLAIN, [b"plain-job"])
    mine = [msgids for identity, msgids in sent[1:] if identity == BUNDLED]
    assert [len(m) for m in mine] == [
        min(MAX_BUNDLE_MESSAGES, count - at) for at in range(0, count, MAX_BUNDLE_MESSAGES)
    ]
    assert [msgid for m in mine for msgid in m] == [b"job-%d" % i for i in range(count)]
    last = outbox.sent[-1]
    if count % MAX_BUNDLE_MESSAGES == 1:  # one left alone: packed, as its REQUEST came
        assert len(last) == 2 and not is_bundle(last[1]) and (count - 1) % 2 == 0
    else:
        assert is_bundle(last[1])
