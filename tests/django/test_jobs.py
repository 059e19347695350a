"""@job(...).delay() from Django: inline modes, argument checks, the wire, and fork safety.

The broker is a raw ROUTER socket bound by the test; what it receives is
decoded with the protocol codec, so these tests pin the frames we send.
"""

from __future__ import annotations

import os
import select
import signal
from collections.abc import Iterator

import pytest

from django_eventmq import job
from django_eventmq.protocol import Request, new_msgid, parse_job
from django_eventmq.runtime import transport
from tests.django.results.conftest import raw_broker
from tests.support import receive_request, wait_for

CALLS: list[tuple[str, tuple[object, ...]]] = []


@job(queue="email", retry_count=2, timeout=30, reply_requested=True)
def notify(address: str, *, urgent: bool = False) -> str:
    CALLS.append(("notify", (address, urgent)))
    return f"sent to {address}"


@job
def plain(n: int) -> int:
    CALLS.append(("plain", (n,)))
    return n * 2


@pytest.fixture(autouse=True)
def _clear_calls() -> Iterator[None]:
    CALLS.clear()
    yield
    CALLS.clear()


@pytest.fixture
def broker(eventmq_settings) -> Iterator[transport.Channel]:
    """A raw ROUTER on a random loopback port, configured as BROKER_ADDR."""
    with raw_broker(eventmq_settings) as channel:
        yield channel


def receive(channel: transport.Channel) -> tuple[bytes, Request]:
    return receive_request(channel)


def test_eager_runs_inline_and_returns_a_msgid(eventmq_settings):
    eventmq_settings(EAGER=True)
    msgid = notify.delay("ann@example.com", urgent=True)
    assert isinstance(msgid, str) and msgid
    assert CALLS == [("notify", ("ann@example.com", True))]


def test_empty_broker_address_runs_inline(eventmq_settings):
    eventmq_settings(BROKER_ADDR="")
    assert plain.delay(21)
    assert CALLS == [("plain", (21,))]


def test_calling_the_job_runs_it_here(eventmq_settings):
    eventmq_settings(BROKER_ADDR="tcp://127.0.0.1:9")  # never contacted
    assert plain(4) == 8
    assert CALLS == [("plain", (4,))]


def test_non_json_arguments_raise_type_error_before_sending(broker):
    with pytest.raises(TypeError, match="not JSON-serialisable"):
        notify.delay(object())
    with pytest.raises(TypeError):
        plain.delay({1, 2})
    # Nothing went out: the first message the broker sees is the next good one.
    msgid = plain.delay(1)
    _identity, message = receive(broker)
    assert message.msgid == msgid
    assert CALLS == []


def test_non_json_arguments_raise_type_error_in_eager_mode_too(eventmq_settings):
    eventmq_settings(EAGER=True)
    with pytest.raises(TypeError):
        plain.delay(object())
    assert CALLS == []


def test_delay_sends_a_request_with_queue_headers_and_body(broker):
    msgid = notify.delay("ann@example.com", urgent=True)
    identity, message = receive(broker)
    assert identity  # a printable identity was set: the reference router needs one
    identity.decode()
    assert message.msgid == msgid
    assert message.queue == "email"
    assert message.headers.reply_requested is True
    assert message.headers.retry_count == 2
    assert message.headers.timeout == 30
    body = parse_job(message.body_text)
    assert body.path == __name__
    assert body.callable == "notify"
    assert body.args == ("ann@example.com",)
    assert body.kwargs == {"urgent": True}
    assert CALLS == []  # not run here


def test_default_queue_and_no_headers(broker):
    plain.delay(3)
    _identity, message = receive(broker)
    assert message.queue == "default"
    assert message.headers.encode() == ""
    assert parse_job(message.body_text).args == (3,)


def test_send_with_explicit_queue_and_msgid(broker):
    wanted = new_msgid()
    assert plain.send((5,), queue="reports", msgid=wanted) == wanted
    _identity, message = receive(broker)
    assert (message.msgid, message.queue) == (wanted, "reports")


def _child_sends(received: int, report: int) -> None:
    """In the forked child: send a job, wait until the test got it, report; never returns."""
    outcome = "the test did not confirm receipt within 10s"
    try:
        plain.delay(2)
        # Stay alive until the test has the message: _exit would drop it
        # from the socket's queue (linger=0).
        if select.select([received], [], [], 10)[0]:
            outcome = "ok"
    except BaseException as exc:
        outcome = repr(exc)
    finally:
        os.write(report, outcome.encode()[:500])
        os._exit(0)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() of a threaded process
def test_client_socket_is_rebuilt_after_fork(broker):
    plain.delay(1)
    parent_identity, _message = receive(broker)

    from_parent, to_child = os.pipe()
    from_child, to_parent = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        _child_sends(from_parent, to_parent)
    os.close(from_parent)
    os.close(to_parent)
    try:
        child_identity, message = receive(broker)
        os.write(to_child, b"got it")
        wait_for(lambda: os.waitpid(pid, os.WNOHANG)[0] == pid, 15, "the child to exit")
        pid = 0
        assert os.read(from_child, 1000).decode() == "ok"
    finally:
        if pid:  # the child is stuck: don't leave it behind
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(to_child)
        os.close(from_child)
    assert parse_job(message.body_text).args == (2,)
    assert child_identity != parent_identity
    # The parent's own socket still works after the child went away.
    plain.delay(3)
    identity, message = receive(broker)
    assert identity == parent_identity
    assert parse_job(message.body_text).args == (3,)
