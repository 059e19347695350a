"""Jobs handed out in a loop iteration wait in the router's outbox until its end.

A worker dropped in between (silent past the heartbeat timeout, unreachable,
INFORMing again) never received them: they wait again with no death
counted, because deaths are what sets a job aside as poisoned. Driven step
by step on a started router (real sockets, no loop thread).
"""

from __future__ import annotations

import errno
import time
from collections.abc import Iterator

import pytest
import zmq

from django_eventmq.core.router import Router
from django_eventmq.protocol import parse_headers
from tests.core.test_router import make_settings

WORKER = b"worker-1"
BODY = b'["run",{"path":"app.jobs","callable":"f","args":[],"kwargs":{}}]'


@pytest.fixture
def router() -> Iterator[Router]:
    """A started router with a DEALER connected to its backend as ``WORKER``."""
    r = Router(make_settings(poison_after=1))
    r.start()
    peer = zmq.Context.instance().socket(zmq.DEALER)
    peer.setsockopt(zmq.LINGER, 0)
    peer.setsockopt(zmq.IDENTITY, WORKER)
    try:
        peer.connect(r.backend_address)
        # Once the router has read a message from it, sends to WORKER can go out.
        peer.send_multipart([b"", b"eMQP/1.0", b"HEARTBEAT", b"hb-1", b"0"])
        assert r.backend.poll(10_000), "the worker's connection never came up"
        r.backend.recv_frames()
        yield r
    finally:
        peer.close()
        r.close()


def hand_out_one(router: Router, msgid: str) -> None:
    now = time.monotonic()
    router.routing.add_worker(WORKER, ((10, "default"),), now)
    router.book.ready(WORKER, now)
    frames = [b"", b"eMQP/1.0", b"REQUEST", msgid.encode(), b"default", b"guarantee", BODY]
    router.book.accept(b"client-1", frames, msgid, "default", parse_headers("guarantee"), now)
    assert [job.msgid for _worker, job in router._outbox] == [msgid]  # handed out, not sent


def test_a_dropped_workers_unsent_jobs_wait_again_without_a_death(router: Router) -> None:
    hand_out_one(router, "m-1")

    router._worker_failed(WORKER, "silent for more than 5s")
    router._flush_deliveries()

    waiting = router.routing.waiting.index
    assert "m-1" in waiting  # waits again...
    assert waiting["m-1"].deaths == 0  # ...not poisoned, though POISON_AFTER is 1
    assert not router.book.poisoned
    assert "m-1" not in router.routing.inflight


def test_a_job_that_was_sent_still_counts_a_death_when_its_worker_is_dropped(
    router: Router,
) -> None:
    hand_out_one(router, "m-2")
    router._flush_deliveries()  # sent: the worker may have started it

    router._worker_failed(WORKER, "silent for more than 5s")

    assert router.book.poisoned["default"] == 1  # POISON_AFTER=1: set aside


def test_an_unexpected_send_error_strands_no_job_after_it(
    router: Router, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ZeroMQ errors other than 'full' and 'unreachable' cannot be provoked on demand:
    the first send is made to raise one; the job after it must go out next time."""
    hand_out_one(router, "m-3")
    router.book.ready(WORKER, time.monotonic())
    frames = [b"", b"eMQP/1.0", b"REQUEST", b"m-4", b"default", b"", BODY]
    router.book.accept(b"client-1", frames, "m-4", "default", parse_headers(""), time.monotonic())
    assert [job.msgid for _w, job in router._outbox] == ["m-3", "m-4"]
    real_send = router.backend.send_frames
    calls: list[bytes] = []

    def first_send_fails(frames: list[bytes], *, flags: int = 0) -> None:
        calls.append(frames[4])
        if len(calls) == 1:
            raise zmq.ZMQError(errno.EPROTO)
        real_send(frames, flags=flags)

    monkeypatch.setattr(router.backend, "send_frames", first_send_fails)
    with pytest.raises(zmq.ZMQError):
        router._flush_deliveries()
    assert [job.msgid for _w, job in router._outbox] == ["m-4"]  # kept, not stranded

    router._flush_deliveries()

    assert calls == [b"m-3", b"m-4"] and router._outbox == []
