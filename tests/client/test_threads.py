"""A job sent from a thread that ends at once still reaches the router.

Thread-per-request servers (``runserver``, ``ThreadingMixIn``) and thread
pools end the thread that called ``.delay()``, maybe before the router read
its jobs. Its client socket is then kept open for the next thread rather
than closed: closing it let the router's ACKs meet a closed socket, whose
reset threw away the jobs the router had not read yet. Shown with a real
router and job manager counting every job that ran, and with a router that
reads nothing while the sending thread queues its jobs and ends.
"""

from __future__ import annotations

import gc
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import zmq

from django_eventmq.client.pool import close_clients, get_client
from tests.support import tcp_addr, wait_for
from tests.system.chaos.jobs import RECORD_ENV, record
from tests.system.chaos.support import recorded, start_jobmanager, start_router, wait_recorded

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


@pytest.mark.parametrize("threads_of", ["Thread", "ThreadPoolExecutor"])
def test_every_job_sent_by_threads_that_end_runs_once(
    tmp_path: Path, eventmq_settings, threads_of: str
) -> None:
    # 8 threads each send 2,500 plain jobs (no guarantee) and end while the router
    # is still reading them; the process goes on. Before, over half never ran.
    threads, per_thread = 8, 2_500
    frontend, backend, admin = tcp_addr(), tcp_addr(), tcp_addr()
    ran = tmp_path / "ran.txt"
    router = start_router(frontend, backend, admin, tmp_path / "journal.sqlite3")
    jobmanager = start_jobmanager(backend, concurrency=2, **{RECORD_ENV: str(ran)})
    eventmq_settings(BROKER_ADDR=frontend)

    def send(index: int) -> None:
        for i in range(per_thread):
            record.delay(f"{index}-{i}")

    try:
        if threads_of == "Thread":
            senders = [threading.Thread(target=send, args=(n,)) for n in range(threads)]
            for sender in senders:
                sender.start()
            for sender in senders:
                sender.join(60)
            assert not any(sender.is_alive() for sender in senders)
        else:
            # Its threads end at shutdown, after the last job was queued.
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(send, range(threads)))
        gc.collect()  # nothing of the ended threads is left to close later
        expected = {f"{n}-{i}" for n in range(threads) for i in range(per_thread)}
        try:
            lines = wait_recorded(ran, expected, timeout=90)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; {len(set(recorded(ran)))} ran") from None
        assert len(lines) == len(expected)  # each once
    finally:
        close_clients()
        jobmanager.stop()
        router.stop()


def test_a_thread_takes_over_the_open_socket_of_a_thread_that_ended(eventmq_settings) -> None:
    addr = tcp_addr()  # nothing listens: making a client does not wait
    eventmq_settings(BROKER_ADDR=addr)
    made = []

    def use() -> None:
        made.append(get_client(addr))

    for _ in range(2):
        thread = threading.Thread(target=use)
        thread.start()
        thread.join(10)
    first, second = made
    assert second is first and not first.closed  # one socket, never closed between
    assert get_client(addr) is first and first.thread is threading.current_thread()
    close_clients()
    assert first.closed
