"""Jobs handed out in a loop iteration wait in the router's outbox until its end.

A worker dropped in between (silent past the heartbeat timeout, unreachable,
INFORMing again) never received them: they wait again with no death
counted, because deaths are what sets a job aside as poisoned. Driven step
by step on a started router (real sockets, no loop thread).
"""

from __future__ import annotations

import errno
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
import zmq

from django_eventmq.protocol import parse_headers
from django_eventmq.protocol.batch import pack_jobs
from django_eventmq.router.router import Router
from django_eventmq.runtime.admin_client import ask
from tests.router.test_router import make_settings
from tests.support import wait_for
from tests.system.ops.conftest import start_router as router_process

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
    router.book.reports.ready(WORKER, now)
    frames = [b"", b"eMQP/1.0", b"REQUEST", msgid.encode(), b"default", b"guarantee", BODY]
    router.book.accept(b"client-1", frames, msgid, "default", parse_headers("guarantee"), now)
    assert [job.msgid for _worker, job in router.hand_outs.unsent] == [
        msgid
    ]  # handed out, not sent


def test_a_dropped_workers_unsent_jobs_wait_again_without_a_death(router: Router) -> None:
    hand_out_one(router, "m-1")

    router.hand_outs.drop_worker(WORKER, "silent for more than 5s")
    router.hand_outs.flush()

    waiting = router.routing.waiting.index
    assert "m-1" in waiting  # waits again...
    assert waiting["m-1"].deaths == 0  # ...not poisoned, though POISON_AFTER is 1
    assert not router.book.poisoned.by_queue
    assert "m-1" not in router.routing.inflight


def test_a_job_that_was_sent_still_counts_a_death_when_its_worker_is_dropped(
    router: Router,
) -> None:
    hand_out_one(router, "m-2")
    router.commits.sync(force=True)  # stored, then sent: the worker may have started it

    router.hand_outs.drop_worker(WORKER, "silent for more than 5s")

    assert router.book.poisoned.by_queue["default"] == 1  # POISON_AFTER=1: set aside


def test_an_unexpected_send_error_strands_no_job_after_it(
    router: Router, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ZeroMQ errors other than 'full' and 'unreachable' cannot be provoked on demand:
    the first send is made to raise one; the job after it must go out next time."""
    hand_out_one(router, "m-3")
    router.book.reports.ready(WORKER, time.monotonic())
    frames = [b"", b"eMQP/1.0", b"REQUEST", b"m-4", b"default", b"", BODY]
    router.book.accept(b"client-1", frames, "m-4", "default", parse_headers(""), time.monotonic())
    assert [job.msgid for _w, job in router.hand_outs.unsent] == ["m-3", "m-4"]
    real_send = router.backend.send_frames
    calls: list[bytes] = []

    def first_send_fails(frames: list[bytes], *, flags: int = 0) -> None:
        calls.append(frames[4])
        if len(calls) == 1:
            raise zmq.ZMQError(errno.EPROTO)
        real_send(frames, flags=flags)

    monkeypatch.setattr(router.backend, "send_frames", first_send_fails)
    with pytest.raises(zmq.ZMQError):
        router.commits.sync(force=True)  # the commit, then the hand-outs it stored
    assert [job.msgid for _w, job in router.hand_outs.unsent] == ["m-4"]  # kept, not stranded

    router.hand_outs.flush()

    assert calls == [b"m-3", b"m-4"] and router.hand_outs.unsent == []


# -- messages for clients that do not read them (OUTBOX_BUDGET) --------------------------
#: The router's budget for messages queued for all clients: about 500 of the ACKs below.
BUDGET = 1024 * 1024
V = b"eMQP/1.0"
#: Long msgids make long ACKs, so the clients' and the kernel's buffers fill soon.
PAD = b"x" * 2000


def msgid(client: int, n: int) -> bytes:
    return b"s%d-%d-%s" % (client, n, PAD)


def silent_client(ctx: zmq.Context[Any], frontend: str, name: str) -> zmq.Socket[Any]:
    """A DEALER that sends and never reads; its small receive buffers make what the
    router sends it pile up at the router soon."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, name.encode())
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVHWM, 1)
    sock.setsockopt(zmq.RCVBUF, 4096)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.connect(frontend)
    return sock


def request(sock: zmq.Socket[Any], msgid: bytes) -> None:
    sock.send_multipart([b"", V, b"REQUEST", msgid, b"default", b"guarantee", BODY])


def test_clients_that_never_read_are_cut_off_at_the_budget_and_the_router_serves_on() -> None:
    """Eight clients send REQUESTs (the same 5 msgids again and again: each is ACKed)
    and read none of the ACKs. Past OUTBOX_BUDGET the heaviest are cut off, each
    named in one warning; the queued bytes stay within the budget; a reading client
    is served; a cut-off client's jobs stay stored, and one it sends again once it
    reads gets its ACK."""
    router, (frontend, _backend, admin) = router_process(env={"EMQ_OUTBOX_BUDGET": str(BUDGET)})
    ctx = zmq.Context()
    try:
        silent = [silent_client(ctx, frontend, f"silent-{i}") for i in range(8)]

        def flood() -> int:
            for n in range(200):
                for i, sock in enumerate(silent):
                    request(sock, msgid(i, n % 5))
            return int(ask(admin, "MONITOR")["clients_cut_off"])

        wait_for(flood, 60, "a silent client to be cut off")
        monitor = ask(admin, "MONITOR")
        assert monitor["outbox_budget"] == BUDGET
        assert 0 <= monitor["outbox_bytes"] <= BUDGET
        cut = re.findall(
            r"client (silent-\d) cut off: .* over OUTBOX_BUDGET \(1048576", router.output()
        )
        assert cut, router.output()[-3000:]

        reader = ctx.socket(zmq.DEALER)
        reader.setsockopt(zmq.LINGER, 0)
        reader.connect(frontend)
        request(reader, b"reader-1")
        assert reader.poll(10_000), "a reading client got no ACK"
        assert reader.recv_multipart()[2] == b"ACK"

        # The cut-off client's jobs are stored (5 msgids each, every client).
        status = ask(admin, "STATUS")
        assert status["waiting_messages_by_queue"]["default"] == 8 * 5 + 1
        # It reads again: what is still in its pipe, then the ACK of a job sent again.
        index = int(cut[0].removeprefix("silent-"))
        victim, again = silent[index], msgid(index, 0)
        while victim.poll(200):
            victim.recv_multipart()
        request(victim, again)

        def acked() -> bool:
            while victim.poll(100):
                frames = victim.recv_multipart()
                if frames[2] == b"ACK" and frames[4] == again:
                    return True
            return False

        wait_for(acked, 20, "the ACK of the job the cut-off client sent again")
        assert ask(admin, "STATUS")["waiting_messages_by_queue"]["default"] == 8 * 5 + 1

        # Clients gone: what waited for them is dropped, and the count is back to 0.
        for sock in silent:
            sock.close()
        wait_for(lambda: ask(admin, "MONITOR")["outbox_clients"] == 0, 20, "an empty outbox")
        assert ask(admin, "MONITOR")["outbox_bytes"] == 0
    finally:
        ctx.destroy(linger=0)
        router.stop()


def test_one_client_past_outbox_peer_bytes_is_cut_off() -> None:
    """OUTBOX_PEER_BYTES bounds one client's queue, however little the others hold."""
    router, (frontend, _backend, admin) = router_process(
        env={"EMQ_OUTBOX_PEER_BYTES": str(BUDGET // 4)}
    )
    ctx = zmq.Context()
    try:
        sock = silent_client(ctx, frontend, "silent-0")

        def flood() -> int:
            for n in range(200):
                request(sock, msgid(0, n % 5))
            return int(ask(admin, "MONITOR")["clients_cut_off"])

        wait_for(flood, 60, "the silent client to be cut off")
        router.wait_output(r"client silent-0 cut off: .* over OUTBOX_PEER_BYTES \(262144 bytes")
        assert ask(admin, "MONITOR")["outbox_bytes"] <= BUDGET // 4
    finally:
        ctx.destroy(linger=0)
        router.stop()


class ClientPipe:
    """The frontend's send, with one client's ZeroMQ pipe full or not (a pipe that
    fills only once the kernel's buffers do cannot be had at will): what went out."""

    def __init__(self, router: Router, identity: bytes) -> None:
        self.identity = identity
        self.full = True
        self.got: list[tuple[bytes, bytes]] = []  # (ACK or REJECT, the msgid it answers)
        self._send = router.frontend.send_frames

    def send_frames(self, frames: Any, *, flags: int = 0) -> None:
        if frames[0] != self.identity:
            self._send(frames, flags=flags)
        elif self.full:
            raise zmq.Again()
        else:
            self.got.append((frames[3], frames[5]))


def test_a_batch_whose_reject_waits_in_the_outbox_gets_no_ack(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A BATCH's ACK says every job not REJECTed is stored, so it may go only behind
    its REJECTs. One that waits in the outbox may be dropped with it when the
    client is cut off, while the ACK, sent once the client reads again, would
    reach it: the job refused would be taken as stored. So the batch gets no
    ACK; sent again into a free pipe, it gets the REJECT, then the ACK."""
    router = Router(make_settings(outbox_peer_bytes=10_000))
    router.start()
    try:
        pipe = ClientPipe(router, b"client-1")
        monkeypatch.setattr(router.frontend, "send_frames", pipe.send_frames)
        jobs = [(b"good", b"default", b"", BODY), (b"bad", b"default", b"", b"not a job")]
        batch = (b"client-1", b"batch-1", pack_jobs(jobs))
        router.front._fast_batch(batch, time.monotonic())  # its REJECT waits
        router.outbox.send_frames([b"client-1", b"x" * 20_000])  # over the cap: cut off
        assert router.outbox.as_dict()["clients_cut_off"] == 1

        pipe.full = False  # it reads again
        router.commits.sync(force=True)
        assert (b"ACK", b"batch-1") not in pipe.got

        router.front._fast_batch(batch, time.monotonic())  # sent again
        router.commits.sync(force=True)
        assert pipe.got == [(b"REJECT", b"bad"), (b"ACK", b"batch-1")]
        assert router.book.duplicates == 1  # the good job, stored once
    finally:
        router.close()


def test_a_job_goes_out_before_the_commit_that_stores_it(router: Router) -> None:
    """The default: a job handed out goes to its job manager at the iteration's end
    while its commit is still to come (the ACK waits for the commit, not the job)."""
    hand_out_one(router, "m-1")
    job = router.hand_outs.unsent[0][1]
    assert router.hand_outs.durable_seq < job.seq  # no commit holds it yet
    router.hand_outs.flush()
    assert router.hand_outs.unsent == []
    assert router.book.stats.dispatched["default"] == 1


def test_a_group_leader_sends_a_job_only_once_a_commit_holds_it(router: Router) -> None:
    """``before_commit`` off (a router group's leader, which may lose its lease at the
    commit): the job waits until a commit that holds it returned."""
    router.hand_outs.before_commit = False
    hand_out_one(router, "m-1")
    router.hand_outs.flush()
    assert [job.msgid for _worker, job in router.hand_outs.unsent] == ["m-1"]
    assert router.book.stats.dispatched["default"] == 0
    router.commits.sync(force=True)  # the commit returns, then the job goes out
    assert router.hand_outs.unsent == []
    assert router.book.stats.dispatched["default"] == 1
