"""A job sent from a thread that ends at once still reaches the router.

Thread-per-request servers (``runserver``, ``ThreadingMixIn``) end the thread
that called ``.delay()`` right after the response; its thread-local client
socket is then closed by garbage collection. A job still queued in it (the
TCP connection may not be up yet) must not be thrown away: the client's
socket lingers (``SEND_TIMEOUT``) so ZeroMQ delivers it. Shown here with the
router started only after the sending thread has gone.
"""

from __future__ import annotations

import gc
import threading

from django_eventmq.core import transport
from django_eventmq.core.client import get_client
from django_eventmq.protocol import Features, Request
from tests.support import tcp_addr

BODY = b'["run",{"path":"app.jobs","callable":"f","args":[1],"kwargs":{}}]'


def test_a_job_sent_by_a_thread_that_ended_is_delivered_when_the_router_comes(
    eventmq_settings,
):
    addr = tcp_addr()  # nothing listens yet
    eventmq_settings(BROKER_ADDR=addr)

    def request_thread() -> None:
        get_client(addr).send_request_frames(b"m-thread", b"default", b"", BODY)

    thread = threading.Thread(target=request_thread)
    thread.start()
    thread.join(10)
    gc.collect()  # the thread's client is gone: its socket was closed

    router = transport.Channel(transport.ROUTER, bind=addr)
    try:
        assert router.poll(10_000), "the client's FEATURES never arrived"
        _identity, _frames, features = router.recv()
        assert isinstance(features, Features)  # a client says what it speaks first
        assert router.poll(10_000), "the job sent before the thread ended never arrived"
        _identity, _frames, message = router.recv()
    finally:
        router.close()
    assert isinstance(message, Request) and message.msgid == "m-thread"
