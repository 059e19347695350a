"""A job sent from a thread that ends at once still reaches the router.

Thread-per-request servers (``runserver``, ``ThreadingMixIn``) end the thread
that called ``.delay()`` right after the response; its thread-local client
socket is then closed by garbage collection. A job still queued in it must
not be thrown away: the client's socket lingers (``SEND_TIMEOUT``) so ZeroMQ
delivers it. Shown here with the router started only while the sending
thread waits in ``.delay()`` for one (no job is queued without a router
connected).
"""

from __future__ import annotations

import gc
import threading

from django_eventmq.core import transport
from django_eventmq.core.client import get_client
from tests.support import receive_request, tcp_addr

BODY = b'["run",{"path":"app.jobs","callable":"f","args":[1],"kwargs":{}}]'


def test_a_job_sent_by_a_thread_that_ended_is_delivered_when_the_router_comes(
    eventmq_settings,
):
    addr = tcp_addr()  # nothing listens yet
    eventmq_settings(BROKER_ADDR=addr, SEND_TIMEOUT=30)
    sending = threading.Event()

    def request_thread() -> None:
        client = get_client(addr, send_timeout=30)
        sending.set()
        client.send_request_frames(b"m-thread", b"default", b"", BODY)

    thread = threading.Thread(target=request_thread)
    thread.start()
    assert sending.wait(10)
    router = transport.Channel(transport.ROUTER, bind=addr)
    try:
        thread.join(30)  # .delay() returned once the router was connected
        assert not thread.is_alive()
        gc.collect()  # the thread's client is gone: its socket was closed
        _identity, message = receive_request(router)
    finally:
        router.close()
    assert message.msgid == "m-thread"
