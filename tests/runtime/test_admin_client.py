"""The admin tool never waits on a send: a router that refused the handshake leaves the
socket without a connection, where a plain send would wait for ever (seen under load in
tests/django/test_admin_curve.py's refusal test, which then hit pytest's timeout)."""

from __future__ import annotations

from django_eventmq.protocol import AdminRequest, new_msgid
from django_eventmq.runtime import transport
from django_eventmq.runtime.admin_client import send_now
from tests.support import tcp_addr


def test_send_now_says_false_instead_of_waiting_without_a_connection() -> None:
    # IMMEDIATE: queue only toward a completed connection, as after a refused handshake.
    channel = transport.Channel(
        transport.DEALER, connect=tcp_addr(), options={transport.IMMEDIATE: 1}
    )
    try:
        assert send_now(channel, AdminRequest(msgid=new_msgid(), action="STATUS")) is False
    finally:
        channel.close()


def test_send_now_queues_toward_a_listening_router() -> None:
    router = transport.Channel(transport.ROUTER, bind="tcp://127.0.0.1:*")
    channel = transport.Channel(transport.DEALER, connect=router.address)
    try:
        assert send_now(channel, AdminRequest(msgid=new_msgid(), action="STATUS")) is True
        assert router.poll(10_000)
    finally:
        channel.close()
        router.close()
