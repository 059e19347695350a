"""The router's session reads the jobs a job manager holds from its FEATURES answer."""

from __future__ import annotations

from typing import Any

import pytest

from django_eventmq.protocol import Features, Inform, new_msgid
from django_eventmq.protocol import constants as C
from django_eventmq.protocol.features import HOLDING, JOBMANAGER_FEATURES
from django_eventmq.protocol.session import RouterPeerSession


def answered(features: dict[str, Any]) -> RouterPeerSession:
    peer = RouterPeerSession()
    peer.receive(Inform(msgid=new_msgid(), queues=((10, "default"),), peer_type=C.PEER_WORKER))
    peer.receive(Features(msgid=new_msgid(), features=features))
    return peer


def test_the_msgids_it_holds_each_once_in_its_order() -> None:
    peer = answered({**JOBMANAGER_FEATURES, HOLDING: ["b", "a", "b"]})
    assert peer.holding() == ["b", "a"]
    assert peer.extended and peer.credit == 0  # naming jobs gives or takes no slot


@pytest.mark.parametrize(
    ("listed", "held"),
    [
        (None, []),
        ("m1", []),  # not a list
        ({"m1": 1}, []),
        (["m1", 7, None, "", ["m2"], "m3"], ["m1", "m3"]),
    ],
)
def test_what_is_not_a_list_of_msgids_is_left_out(listed: Any, held: list[str]) -> None:
    features = dict(JOBMANAGER_FEATURES)
    if listed is not None:
        features[HOLDING] = listed
    assert answered(features).holding() == held


def test_nothing_held_before_its_features_answer() -> None:
    peer = RouterPeerSession()
    peer.receive(Inform(msgid=new_msgid(), queues=((10, "default"),), peer_type=C.PEER_WORKER))
    assert peer.holding() == []
