"""A FEATURES "bundle" value is the most bytes of one frame its announcer takes.

ZeroMQ drops a peer that sends a frame over the receiver's MAXMSGSIZE (its
MAX_MESSAGE_BYTES), and a bundle adds many messages together: a sender cuts its
bundles at what the receiver announced, never at its own limit.
"""

from __future__ import annotations

from typing import Any

import pytest

from django_eventmq.protocol import Features
from django_eventmq.protocol.bundle import BUNDLE, bundle, runs
from django_eventmq.protocol.features import ROUTER_FEATURES, bundle_bytes, with_bundle_bytes
from django_eventmq.protocol.limits import MAX_MESSAGE_BYTES
from django_eventmq.protocol.session import RouterPeerSession


@pytest.mark.parametrize(
    ("value", "limit"),
    [
        (262_144, 262_144),
        (1, 1),
        (MAX_MESSAGE_BYTES * 4, MAX_MESSAGE_BYTES),  # never more than a message may be
        (None, 0),  # did not say "bundle"
        (0, 0),
        (-5, 0),
        (True, 0),  # not a number of bytes
        ("262144", 0),
        (2.5, 0),
        ([1], 0),
    ],
)
def test_the_announced_value_is_the_limit_or_no_bundles(value: Any, limit: int) -> None:
    assert bundle_bytes(value) == limit


def test_a_router_or_job_manager_announces_its_own_max_message_bytes() -> None:
    assert with_bundle_bytes(ROUTER_FEATURES, 262_144)[BUNDLE] == 262_144
    assert BUNDLE not in with_bundle_bytes({"packed": 1}, 262_144)  # says nothing new


def test_the_router_cuts_bundles_at_what_the_job_manager_takes() -> None:
    session = RouterPeerSession()
    session.receive(_inform())
    session.receive(Features(msgid="f", features={"done": 1, BUNDLE: 10_000}))
    assert session.bundle and session.bundle_bytes == 10_000
    jobs = [[b"", b"eMQP/1.0", b"REQUEST", b"m-%d" % n, b"q", b"", b"x" * 3000] for n in range(8)]
    cuts = runs(jobs, max_bytes=session.bundle_bytes)
    assert sum(cuts) == 8 and len(cuts) > 1
    start = 0
    for taken in cuts:
        if taken > 1:
            assert len(bundle(jobs[start : start + taken])) <= 10_000
        start += taken


def _inform() -> Any:
    from django_eventmq.protocol import Inform

    return Inform(msgid="i", queues=((10, "default"),), peer_type="worker")
