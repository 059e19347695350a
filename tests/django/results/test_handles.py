"""JobHandle: still the msgid string; .wait() gets its own outcome from the client socket.

The router is a raw ROUTER socket in the test's thread: it receives the
REQUEST and sends back the REPLY / REJECT / ACK frames our router will send.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest

from django_eventmq.client import inbox
from django_eventmq.client.handles import EagerHandle, JobHandle, NoReplyHandle
from django_eventmq.errors import EventMQError, JobError, JobRejected, ResultTimeout
from django_eventmq.protocol import Ack, Cancel, Heartbeat, Reject, Reply, new_msgid
from tests.django.results import jobs
from tests.django.results.conftest import receive_request
from tests.support import ROOT


def reply(channel, identity, job_msgid, payload) -> None:
    channel.send_to(
        identity, Reply(msgid=new_msgid(), payload=json.dumps(payload), reply_to=job_msgid)
    )


def test_handle_is_the_msgid_string(broker):
    handle = jobs.add.delay(1, 2)
    _identity, request = receive_request(broker)
    assert isinstance(handle, JobHandle) and isinstance(handle, str)
    assert handle == request.msgid == handle.msgid
    assert json.dumps({"id": handle}) == json.dumps({"id": request.msgid})
    assert {handle: 1}[request.msgid] == 1
    assert repr(handle) == f"<JobHandle {request.msgid!r}>"


def test_wait_returns_the_value_from_the_reply(broker):
    handle = jobs.add.delay(2, 3)
    identity, request = receive_request(broker)
    assert request.headers.reply_requested
    reply(broker, identity, request.msgid, {"value": 5})
    assert handle.wait(timeout=10) == 5


def test_wait_raises_the_remote_error(broker):
    handle = jobs.explode.delay("nope")
    identity, request = receive_request(broker)
    reply(
        broker,
        identity,
        request.msgid,
        {
            "value": "'nope'",
            "error": {"type": "KeyError", "message": "'nope'", "traceback": "Traceback ..."},
        },
    )
    with pytest.raises(JobError) as caught:
        handle.wait(timeout=10)
    assert caught.value.exc_type == "KeyError"
    assert caught.value.message == "'nope'"
    assert caught.value.traceback == "Traceback ..."


def test_wait_raises_rejected_on_reject(broker):
    handle = jobs.add.delay(1, 1)
    identity, request = receive_request(broker)
    broker.send_to(
        identity, Reject(msgid=new_msgid(), job_msgid=request.msgid, reason="queue is full")
    )
    with pytest.raises(JobRejected, match="queue is full"):
        handle.wait(timeout=10)


def test_wait_times_out_when_no_outcome_comes(broker):
    handle = jobs.add.delay(1, 1)
    receive_request(broker)
    with pytest.raises(ResultTimeout, match=handle):
        handle.wait(timeout=0.2)


def test_each_handle_gets_its_own_outcome_whatever_the_order(broker, caplog):
    first, second, third = jobs.add.delay(1, 0), jobs.add.delay(2, 0), jobs.add.delay(3, 0)
    requests = [receive_request(broker) for _ in range(3)]
    identity = requests[0][0]
    # Other traffic on the same socket: ACKs, a heartbeat, a malformed message.
    broker.send_to(identity, Ack(msgid=new_msgid(), ack_msgid=first))
    broker.send_to(identity, Heartbeat(msgid=new_msgid(), timestamp=1.0))
    broker.send_frames([identity, b"", b"eMQP/1.0", b"REPLY"])
    # The reference router's receipt (a REPLY without reply_to) is not an outcome.
    broker.send_to(identity, Reply(msgid=new_msgid(), payload=first))
    for _identity, request in reversed(requests):
        reply(broker, identity, request.msgid, {"value": request.msgid})
    with caplog.at_level(logging.WARNING, "django_eventmq.client"):
        assert second.wait(timeout=10) == second  # arrives after third's, which is kept
        assert third.wait(timeout=0) == third
        assert first.wait(timeout=10) == first
    assert "malformed" in caplog.text


def test_outcomes_nobody_waits_for_are_bounded(broker, monkeypatch, caplog):
    monkeypatch.setattr(inbox, "MAX_KEPT_OUTCOMES", 2)
    handles = [jobs.add.delay(n, 0) for n in range(3)]
    identity = None
    for _ in handles:
        identity, request = receive_request(broker)
        reply(broker, identity, request.msgid, {"value": 1})
    last = handles[-1]
    with caplog.at_level(logging.WARNING, "django_eventmq.client"):
        assert last.wait(timeout=10) == 1
    assert handles[1].wait(timeout=0) == 1
    with pytest.raises(ResultTimeout):
        handles[0].wait(timeout=0.05)  # the oldest was dropped (and that was logged)
    assert f"msgid={handles[0]}" in caplog.text


def test_a_job_without_reply_requested_refuses_to_wait(broker):
    handle = jobs.fire_and_forget.delay(1)
    receive_request(broker)
    assert isinstance(handle, NoReplyHandle)
    with pytest.raises(EventMQError, match="reply_requested"):
        handle.wait(timeout=1)


def test_send_with_explicit_headers_picks_the_handle(broker):
    from django_eventmq.protocol import Headers

    handle = jobs.fire_and_forget.send((1,), headers=Headers(reply_requested=True))
    identity, request = receive_request(broker)
    reply(broker, identity, request.msgid, {"value": 1})
    assert type(handle) is JobHandle
    assert handle.wait(timeout=10) == 1


@pytest.mark.django_db
def test_cancel_sends_cancel_for_the_job_and_records_it(broker):
    from django_eventmq.models.results import JobResult

    handle = jobs.add.delay(1, 1)
    receive_request(broker)
    handle.cancel()
    assert broker.poll(10_000)
    _identity, _frames, message = broker.recv()
    assert isinstance(message, Cancel)
    assert message.job_msgid == handle
    # Not recorded yet as anything else, so the table says cancelled.
    assert JobResult.objects.get(msgid=handle).status == "cancelled"
    assert handle.status == "cancelled"


def test_eager_handle_waits_for_nothing(eventmq_settings):
    eventmq_settings(EAGER=True)
    handle = jobs.add.delay(20, 22)
    assert isinstance(handle, EagerHandle)
    assert handle.wait() == 42
    handle.cancel()  # already ran: nothing to do, no error


def test_the_errors_and_the_handle_are_importable_from_the_package_without_django():
    code = (
        "import sys\n"
        "from django_eventmq import (BrokerUnavailable, JobError, JobHandle, JobRejected,\n"
        "    ResultNotReady, ResultTimeout, SerializationError)\n"
        "from django_eventmq import errors\n"
        "from django_eventmq.client import handles\n"
        "assert (BrokerUnavailable, JobError, JobRejected, ResultTimeout) == (\n"
        "    errors.BrokerUnavailable, errors.JobError, errors.JobRejected, errors.ResultTimeout)\n"
        "assert SerializationError is errors.SerializationError\n"
        "assert (JobHandle, ResultNotReady) == (handles.JobHandle, handles.ResultNotReady)\n"
        "print('django' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout) == (0, "False\n"), done.stderr
    import django_eventmq

    for name in django_eventmq.__all__:  # every public name resolves
        assert getattr(django_eventmq, name) is not None, name
