"""What each side announces in FEATURES, and how a peer's announcement is read.

A router of ours sends :data:`ROUTER_FEATURES` right after the ACK of a job
manager's INFORM; the job manager answers :data:`JOBMANAGER_FEATURES`. The
sessions (:mod:`.session`) carry the exchange; this module is what is said.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from django_eventmq.protocol.bundle import BUNDLE
from django_eventmq.protocol.limits import MAX_MESSAGE_BYTES
from django_eventmq.protocol.packed import PACKED

#: What a router of ours tells a job manager it speaks, right after the ACK of its INFORM.
#: ``"bundle"``'s value is the most bytes of one frame the announcer takes (its
#: ``MAX_MESSAGE_BYTES``: ZeroMQ drops a peer that sends more); a router or job
#: manager announces its own setting (:func:`with_bundle_bytes`).
ROUTER_FEATURES: Mapping[str, int] = MappingProxyType(
    {BUNDLE: MAX_MESSAGE_BYTES}
    | dict.fromkeys(
        (
            "cancel",
            "delay",
            "done",
            "nack",
            PACKED,
            "partial",
            "priority",
            "queued",
            "reject",
            "running",
            "unready",
        ),
        1,
    )
)
#: The key of a job manager's FEATURES answer that lists the msgids of the jobs it
#: holds (still running, or not reported yet): after a failover or a reconnect its
#: new router keeps them in flight on it instead of handing them out again.
HOLDING = "holding"
#: The key of a job manager's FEATURES that says why it takes no jobs now (none of
#: its worker processes can start): sent again, without it, once it can. A router
#: shows it (STATUS); it is no negotiation, so a FEATURES may restate it any time.
TROUBLE = "trouble"
#: What a job manager of ours answers to its router's FEATURES.
#: ``"poisoned"``: the job manager records a job the router sets aside after the death
#: it reported (REJECT to it, see :meth:`.session.RouterPeerSession.poisoned`).
JOBMANAGER_FEATURES: Mapping[str, int] = MappingProxyType(
    dict.fromkeys(
        (
            "done",
            "nack",
            "cancel",
            "timeout",
            "retry",
            "partial",
            "unready",
            "poisoned",
            "running",
            PACKED,
        ),
        1,
    )
    | {BUNDLE: MAX_MESSAGE_BYTES}
)


def with_bundle_bytes(features: Mapping[str, Any], max_bytes: int) -> dict[str, Any]:
    """``features`` announcing bundles of at most ``max_bytes`` (the announcer's
    ``MAX_MESSAGE_BYTES``), if they announce bundles at all."""
    result = dict(features)
    if BUNDLE in result:
        result[BUNDLE] = max_bytes
    return result


def bundle_bytes(value: object) -> int:
    """The most bytes of one bundle to a peer whose FEATURES gave ``value`` for
    ``"bundle"``: a whole number >= 1 is its limit (at most MAX_MESSAGE_BYTES);
    anything else (absent, false, not a number): 0, it gets no bundle."""
    if type(value) is not int or value < 1:
        return 0
    return min(value, MAX_MESSAGE_BYTES)


#: Seconds after the ACK a job manager waits for FEATURES before taking its
#: router for the reference (ours sends it right after the ACK).
FEATURES_WAIT = 0.5
