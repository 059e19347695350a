"""The client files partials per job msgid; ``handle.stream()`` reads its own, in order.

A raw ROUTER in this thread plays the router, so each test decides exactly
what arrives and in which interleaving.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from django_eventmq.client import inbox, pool
from django_eventmq.client.handles import JobHandle
from django_eventmq.errors import EventMQError, JobError, JobRejected, ResultTimeout
from django_eventmq.protocol import Message, Partial, Reject, Reply, Request, new_msgid
from django_eventmq.runtime import transport
from tests.django.results.conftest import raw_broker
from tests.support import receive_request, wait_for
from tests.system.streaming import jobs


@pytest.fixture
def broker(eventmq_settings: Any) -> Iterator[transport.Channel]:
    with raw_broker(eventmq_settings) as channel:
        yield channel


def requests(channel: transport.Channel, n: int) -> tuple[bytes, list[Request]]:
    got: list[Request] = []
    identity = b""
    while len(got) < n:
        identity, message = receive_request(channel)
        got.append(message)
    return identity, got


def partial(msgid: str, value: Any) -> Partial:
    return Partial(msgid=new_msgid(), job_msgid=msgid, payload=json.dumps({"value": value}))


def reply(msgid: str, value: Any) -> Reply:
    return Reply(msgid=new_msgid(), payload=json.dumps({"value": value}), reply_to=msgid)


def send_all(channel: transport.Channel, identity: bytes, messages: list[Message]) -> None:
    for message in messages:
        channel.send_to(identity, message)


def test_interleaved_partials_of_many_jobs_reach_their_own_streams(broker):
    handles = [jobs.count_up.delay(f"j{i}", 3) for i in range(20)]
    identity, got = requests(broker, 20)
    assert [r.msgid for r in got] == handles
    # Round robin: step 0 of every job, then step 1 of every job, ... then the replies.
    messages: list[Message] = [partial(h, [h, step]) for step in range(3) for h in handles]
    messages += [reply(h, f"final {h}") for h in reversed(handles)]
    send_all(broker, identity, messages)
    streams = [h.stream(timeout=10) for h in handles]
    seen: dict[str, list[Any]] = {h: [] for h in handles}
    # Read them interleaved too: one partial of each stream in turn.
    for _step in range(3):
        for handle, stream in zip(handles, streams, strict=True):
            seen[handle].append(next(stream))
    for handle, stream in zip(handles, streams, strict=True):
        assert list(stream) == []  # the outcome ends it
        assert seen[handle] == [[handle, 0], [handle, 1], [handle, 2]]
        assert handle.wait(timeout=0) == f"final {handle}"


def test_wait_alone_skips_the_partials(broker):
    handle = jobs.count_up.delay("w", 2)
    identity, _ = requests(broker, 1)
    send_all(broker, identity, [partial(handle, 1), partial(handle, 2), reply(handle, "done")])
    assert handle.wait(timeout=10) == "done"
    assert handle.wait(timeout=0) == "done"  # asked again: the same outcome
    assert list(handle.stream(timeout=0)) == []  # nothing left to stream


def test_a_failed_job_raises_from_its_stream_after_its_partials(broker):
    handle = jobs.count_up.delay("f", 2)
    identity, _ = requests(broker, 1)
    failure = json.dumps(
        {"value": "x", "error": {"type": "KeyError", "message": "'x'", "traceback": ""}}
    )
    send_all(
        broker,
        identity,
        [partial(handle, "half"), Reply(msgid=new_msgid(), payload=failure, reply_to=handle)],
    )
    stream = handle.stream(timeout=10)
    assert next(stream) == "half"
    with pytest.raises(JobError) as caught:
        next(stream)
    assert caught.value.exc_type == "KeyError"
    with pytest.raises(JobError):
        handle.wait(timeout=0)


def test_a_rejected_job_raises_job_rejected_from_stream_and_wait(broker):
    handle = jobs.count_up.delay("r", 2)
    identity, _ = requests(broker, 1)
    send_all(broker, identity, [Reject(msgid=new_msgid(), job_msgid=handle, reason="no way")])
    with pytest.raises(JobRejected, match="no way"):
        list(handle.stream(timeout=10))
    with pytest.raises(JobRejected, match="no way"):
        handle.wait(timeout=0)


def test_stream_times_out_when_nothing_comes(broker):
    handle = jobs.count_up.delay("t", 1)
    requests(broker, 1)
    with pytest.raises(ResultTimeout, match="nothing from job"):
        next(handle.stream(timeout=0.2))


def test_stream_of_a_job_without_reply_requested_refuses_at_once(broker):
    # A mapping turns a decorator option off (a Headers field at its default cannot).
    handle = jobs.count_up.send(("n", 1), headers={"reply_requested": False})
    with pytest.raises(EventMQError, match="without reply_requested"):
        handle.stream()


def test_unread_partials_are_bounded_per_job(broker, monkeypatch):
    monkeypatch.setattr(inbox, "MAX_KEPT_PARTIALS", 5)
    handle = jobs.count_up.delay("b", 1)
    identity, _ = requests(broker, 1)
    send_all(broker, identity, [partial(handle, i) for i in range(12)] + [reply(handle, "ok")])
    client = pool.get_client(broker.address)

    def all_arrived() -> bool:
        client.drain()  # what a client does between sends: files what came, reads nothing
        return handle in client.inbox.outcomes

    wait_for(all_arrived, 10, "the partials and the reply")
    assert list(handle.stream(timeout=10)) == [7, 8, 9, 10, 11]  # the newest five


def test_a_malformed_partial_is_ignored_and_the_stream_goes_on(broker, caplog):
    handle = jobs.count_up.delay("m", 1)
    identity, _ = requests(broker, 1)
    broker.send_frames([identity, b"", b"eMQP/1.0", b"PARTIAL", b"x", handle.encode(), b"{"])
    send_all(broker, identity, [partial(handle, "good"), reply(handle, 1)])
    assert list(handle.stream(timeout=10)) == ["good"]
    assert "malformed" in caplog.text and "PARTIAL: payload is not JSON" in caplog.text


def test_a_handle_is_its_msgid():
    assert isinstance(JobHandle("abc"), str)
