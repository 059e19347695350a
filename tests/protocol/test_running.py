"""RUNNING: a job manager's snapshot of what its worker processes run (emq_status --jobs)."""

from __future__ import annotations

import pytest

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import Running, decode, encode, new_msgid
from django_eventmq.protocol.features import JOBMANAGER_FEATURES, ROUTER_FEATURES
from tests.protocol.test_session import extended, reference


def test_running_round_trips_as_one_json_frame() -> None:
    message = Running(msgid="m1", jobs={"a": (4242, 1.5), "b": (4243, 0)})
    frames = encode(message)
    assert frames[2:] == [b"RUNNING", b"m1", b'{"a":[4242,1.5],"b":[4243,0.0]}']
    assert decode(frames) == Running(msgid="m1", jobs={"a": (4242, 1.5), "b": (4243, 0.0)})
    assert decode(encode(Running(msgid="m2", jobs={}))) == Running(msgid="m2", jobs={})


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"not json", "RUNNING: body is not JSON"),
        (b"[1, 2]", "RUNNING: body must be a JSON object"),
        (b'{"a": 12}', r"RUNNING: expected \{msgid: \[pid, seconds\]\}"),
        (b'{"a": [12]}', "RUNNING: expected"),
        (b'{"a": [-1, 0]}', "RUNNING: expected"),
        (b'{"a": [true, 0]}', "RUNNING: expected"),
        (b'{"": [1, 0]}', "RUNNING: expected"),
    ],
)
def test_a_malformed_running_is_refused_saying_why(body: bytes, error: str) -> None:
    with pytest.raises(ProtocolError, match=error):
        decode([b"", b"eMQP/1.0", b"RUNNING", new_msgid().encode(), body])


def test_only_a_router_that_said_running_is_sent_one() -> None:
    assert ROUTER_FEATURES["running"] == 1 and JOBMANAGER_FEATURES["running"] == 1
    jobs = {"a": (1, 0.5)}
    sent = extended().running(jobs)
    assert isinstance(sent, Running) and sent.jobs == jobs
    assert extended(done=1).running(jobs) is None  # a router of ours from before RUNNING
    assert reference().running(jobs) is None  # the reference router
