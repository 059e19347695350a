"""A job sent from a thread that ends at once still reaches the router.

Thread-per-request servers (``runserver``, ``ThreadingMixIn``) end the thread
that called ``.delay()`` right after the response; its thread-local client
socket is then closed by garbage collection. Jobs still queued in it (the
router has not read them yet) must not be thrown away: the client's socket
lingers (``SEND_TIMEOUT``) so ZeroMQ delivers them. Shown here with a router
that reads nothing while the sending thread queues its jobs and ends.
"""

from __future__ import annotations

import gc
import threading

import zmq

from django_eventmq.client.connection import get_client
from tests.support import wait_for

BODY = b'["run",{"path":"app.jobs","callable":"f","args":[1],"kwargs":{}}]'
#: Jobs of 1 MB: more than the kernel's socket buffers hold, so some are
#: still in the client's socket when its thread ends.
JOBS, PAD = 20, b" " * 1_000_000


def test_jobs_queued_by_a_thread_that_ended_are_delivered_once_the_router_reads(
    eventmq_settings,
):
    # A router that reads nothing until we say: a queue of one, a tiny buffer.
    router = zmq.Context.instance().socket(zmq.ROUTER)
    router.setsockopt(zmq.RCVHWM, 1)
    router.setsockopt(zmq.RCVBUF, 4096)
    router.setsockopt(zmq.LINGER, 0)
    addr = f"tcp://127.0.0.1:{router.bind_to_random_port('tcp://127.0.0.1')}"
    eventmq_settings(BROKER_ADDR=addr, SEND_TIMEOUT=30)

    def request_thread() -> None:
        client = get_client(addr, send_timeout=30)
        for i in range(JOBS):
            client.send_request_frames(b"m-%d" % i, b"default", b"", BODY + PAD)

    thread = threading.Thread(target=request_thread)
    thread.start()
    thread.join(30)
    assert not thread.is_alive()
    gc.collect()  # the thread's client is gone: its socket was closed
    received: list[bytes] = []

    def read() -> bool:
        while router.poll(100):
            frames = router.recv_multipart()
            if frames[3] == b"REQUEST":
                received.append(frames[4])
        return len(received) == JOBS

    try:
        wait_for(read, 30, f"the {JOBS} jobs of the thread that ended")
    finally:
        router.close()
    assert received == [b"m-%d" % i for i in range(JOBS)]
