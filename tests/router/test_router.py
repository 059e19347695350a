"""The router on real loopback sockets, with raw DEALER peers standing in for
clients, job managers, schedulers and an administrator."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import zmq

from django_eventmq.protocol import constants as C
from django_eventmq.protocol import new_msgid
from django_eventmq.router.router import Router
from django_eventmq.runtime import admin_token
from django_eventmq.runtime.settings import Settings
from tests.support import wait_for

ROUTER_LOG = "django_eventmq.router"
JOB = '["run", {"callable": "hello", "path": "vjobs", "args": [1], "kwargs": {}}]'


def make_settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "frontend_addr": "tcp://127.0.0.1:*",
        "backend_addr": "tcp://127.0.0.1:*",
        "admin_addr": "tcp://127.0.0.1:*",
        # Long enough that no test peer is dropped unless a test wants it.
        "heartbeat_interval": 2.0,
        "heartbeat_timeout": 60.0,
        # The same store in memory; tests/router/test_router_journal.py uses files.
        "journal": False,
    }
    values.update(overrides)
    return Settings(**values)


class Peer:
    """A raw DEALER with a printable (or chosen) identity."""

    def __init__(self, ctx: zmq.Context[Any], addr: str, identity: bytes) -> None:
        self.identity = identity
        self.sock: zmq.Socket[Any] = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.IDENTITY, identity)
        self.sock.connect(addr)

    def send(self, command: str, *body: str, msgid: str | None = None) -> str:
        msgid = msgid or new_msgid()
        frames = [b"", b"eMQP/1.0", command.encode(), msgid.encode(), *(b.encode() for b in body)]
        self.sock.send_multipart(frames)
        return msgid

    def send_raw(self, frames: list[bytes]) -> None:
        self.sock.send_multipart(frames)

    def recv_raw(self, timeout: float = 5.0) -> list[bytes]:
        if not self.sock.poll(int(timeout * 1000)):
            raise AssertionError(f"{self.identity!r}: nothing received within {timeout}s")
        return self.sock.recv_multipart()

    def expect(self, command: str, timeout: float = 5.0) -> list[str]:
        """Next message with ``command`` (HEARTBEATs skipped); returns [COMMAND, MSGID, *body]."""
        while True:
            frames = self.recv_raw(timeout)
            assert frames[:2] == [b"", b"eMQP/1.0"], frames
            text = [f.decode() for f in frames[2:]]
            if text[0] in ("HEARTBEAT", "FEATURES") and command != text[0]:
                continue
            assert text[0] == command, f"expected {command}, got {text}"
            return text

    def pending(self) -> bool:
        return bool(self.sock.poll(0))

    def close(self) -> None:
        self.sock.close(linger=0)


class Harness:
    """A router running in a thread, and peers connected to it."""

    def __init__(self, ctx: zmq.Context[Any], settings: Settings) -> None:
        self.ctx = ctx
        self.router = Router(settings)
        self.peers: list[Peer] = []
        self.thread = threading.Thread(target=self.router.run, name="router", daemon=True)
        self.thread.start()
        wait_for(lambda: self.router.admin_address, what="the router to bind")
        self.admin = self.peer("admin", "admin")

    def peer(self, where: str, name: str | bytes) -> Peer:
        addr = {
            "frontend": self.router.frontend_address,
            "backend": self.router.backend_address,
            "admin": self.router.admin_address,
        }[where]
        identity = name if isinstance(name, bytes) else f"{name}-{new_msgid()[:8]}".encode()
        peer = Peer(self.ctx, addr, identity)
        self.peers.append(peer)
        return peer

    def ask(self, command: str) -> dict[str, Any]:
        """An admin command's JSON answer."""
        msgid = self.admin.send(command)
        reply = self.admin.expect("REPLY")
        assert reply[1] != msgid
        return json.loads(reply[2])  # type: ignore[no-any-return]

    def token_frame(self) -> str:
        """The frame that proves a state-changing admin command (the router's token,
        read from its file as the admin tools read it)."""
        token, why = admin_token.read_token(self.router.settings, self.router.admin_address)
        assert token, why
        return C.ADMIN_TOKEN_PREFIX + token

    def slots(self, worker: Peer) -> int | None:
        info = self.ask("ROUTER_SHOW_WORKERS")["connected_workers"].get(worker.identity.decode())
        return None if info is None else int(info["available_slots"])

    def worker(self, name: str, queues: str = "", ready: int = 1) -> Peer:
        """A job manager that INFORMed (queue frame as given) and has ``ready`` slots."""
        peer = self.peer("backend", name)
        inform = peer.send("INFORM", queues, "worker")
        assert peer.expect("ACK")[2] == inform
        peer.expect("FEATURES")  # our router offers its extensions after the ACK
        for _ in range(ready):
            peer.send("READY")
        wait_for(lambda: self.slots(peer) == ready, what=f"{name} to have {ready} slot(s)")
        return peer

    def request(self, client: Peer, queue: str = "default", headers: str = "") -> str:
        """Send a REQUEST and wait for its ACK; returns the msgid."""
        msgid = client.send("REQUEST", queue, headers, JOB)
        ack = client.expect("ACK")
        assert ack[2] == msgid
        return msgid

    def close(self) -> None:
        self.router.stop()
        self.thread.join(10)
        assert not self.thread.is_alive(), "router thread did not stop"
        for peer in self.peers:
            peer.close()


@pytest.fixture
def h(start_router: Callable[..., Harness]) -> Harness:
    return start_router()


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == ROUTER_LOG and r.levelno == logging.WARNING
    ]


# -- start-up -------------------------------------------------------------------


def test_start_logs_one_ready_line_with_bound_addresses(
    start_router: Callable[..., Harness], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=ROUTER_LOG)
    h = start_router()

    def ready_lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if "router ready" in r.getMessage()]

    lines = wait_for(ready_lines, what="the ready line")
    h.ask("STATUS")  # the router is in its loop: no second line will come
    assert len(ready_lines()) == 1
    match = re.fullmatch(r"router ready: frontend=(\S+) backend=(\S+) admin=(\S+)", lines[0])
    assert match is not None
    assert match.groups() == (
        h.router.frontend_address,
        h.router.backend_address,
        h.router.admin_address,
    )
    assert all(re.fullmatch(r"tcp://127\.0\.0\.1:\d+", a) for a in match.groups())


def test_loop_once_can_be_stepped_without_a_thread(zctx: zmq.Context[Any]) -> None:
    router = Router(make_settings())
    try:
        router.start()
        client = Peer(zctx, router.frontend_address, b"stepper")
        try:
            msgid = client.send("REQUEST", "default", "", JOB)

            def step() -> bool:
                router.loop_once(timeout_ms=10, now=1.0)
                return client.pending()

            wait_for(step, what="the ACK")
            assert client.expect("ACK")[2] == msgid
            assert [j.msgid for j in router.routing.waiting["default"]] == [msgid]
        finally:
            client.close()
    finally:
        router.close()


# -- routing ----------------------------------------------------------------------


def test_higher_weight_first_then_least_recently_used(h: Harness) -> None:
    low = h.worker("low", '[[10, "default"]]')
    high1 = h.worker("high1", '[[30, "default"]]')
    high2 = h.worker("high2", '[[30, "default"]]')
    client = h.peer("frontend", "client")
    sent = [h.request(client) for _ in range(3)]
    assert high1.expect("REQUEST")[1] == sent[0]
    assert high2.expect("REQUEST")[1] == sent[1]
    assert low.expect("REQUEST")[1] == sent[2]


def test_request_is_forwarded_with_the_clients_msgid_and_headers(h: Harness) -> None:
    # A worker that does not speak our extensions (the reference's) is asked for a
    # reply to every job: its REPLY names the job that ended, a READY does not.
    worker = h.worker("w")
    client = h.peer("frontend", "client")
    msgid = h.request(client, headers="retry-count:3,timeout:30,x-extra")
    frames = worker.recv_raw()
    assert frames == [
        b"",
        b"eMQP/1.0",
        b"REQUEST",
        msgid.encode(),
        b"default",
        b"retry-count:3,timeout:30,x-extra,reply-requested",
        JOB.encode(),
    ]


def test_one_request_per_ready_and_buffering_until_a_slot_comes(h: Harness) -> None:
    worker = h.worker("w", ready=1)
    client = h.peer("frontend", "client")
    first = h.request(client)
    second = h.request(client)
    assert worker.expect("REQUEST")[1] == first
    status = h.ask("STATUS")
    assert status["waiting_messages_by_queue"] == {"default": 1}
    assert status["inflight_messages_by_queue"] == {"default": 1}
    assert not worker.pending()
    worker.send("READY")
    assert worker.expect("REQUEST")[1] == second
    assert h.ask("STATUS")["waiting_messages_by_queue"] == {}


def test_request_for_an_unserved_queue_waits_for_that_queue(h: Harness) -> None:
    default_worker = h.worker("dflt")  # empty queue frame: the default queue
    client = h.peer("frontend", "client")
    msgid = h.request(client, queue="email")
    assert h.ask("STATUS")["waiting_messages_by_queue"] == {"email": 1}
    assert h.slots(default_worker) == 1
    assert not default_worker.pending()
    email_worker = h.worker("mail", '[[10, "email"]]', ready=0)
    email_worker.send("READY")
    assert email_worker.expect("REQUEST")[1] == msgid


def test_ready_hands_out_waiting_work_by_the_workers_weights(h: Harness) -> None:
    client = h.peer("frontend", "client")
    low = h.request(client, queue="low")
    high = h.request(client, queue="high")
    worker = h.worker("w", '[[10, "low"], [50, "high"]]', ready=0)
    worker.send("READY")
    assert worker.expect("REQUEST")[1] == high
    worker.send("READY")
    assert worker.expect("REQUEST")[1] == low


def test_every_request_is_acked_to_its_client(h: Harness) -> None:
    client = h.peer("frontend", "client")
    msgid = client.send("REQUEST", "default", "", JOB)
    ack = client.expect("ACK")
    assert ack[0] == "ACK" and ack[2] == msgid and ack[1] != msgid
    assert len(ack) == 3


def test_reply_is_forwarded_to_the_client_that_asked(h: Harness) -> None:
    worker = h.worker("w", ready=2)
    one = h.peer("frontend", "one")
    two = h.peer("frontend", "two")
    m1 = h.request(one, headers="reply-requested")
    m2 = h.request(two, headers="reply-requested")
    got = {worker.expect("REQUEST")[1], worker.expect("REQUEST")[1]}
    assert got == {m1, m2}
    reply_id = worker.send("REPLY", '{"value": 2}', m2)
    assert two.recv_raw() == [
        b"",
        b"eMQP/1.0",
        b"REPLY",
        reply_id.encode(),
        b'{"value": 2}',
        m2.encode(),
    ]
    worker.send("REPLY", '{"value": 1}', m1)
    assert one.expect("REPLY")[2:] == ['{"value": 1}', m1]
    assert not one.pending() and not two.pending()
    status = h.ask("STATUS")
    assert status["processed_messages_by_queue"] == {"default": 2}
    assert status["processed_messages_by_worker"] == {worker.identity.decode(): 2}
    assert status["inflight_messages_by_queue"] == {}


def test_client_with_a_binary_identity_is_served(h: Harness) -> None:
    worker = h.worker("w")
    client = h.peer("frontend", b"\xff\xfe-binary-\x80")
    msgid = h.request(client, headers="reply-requested")
    assert worker.expect("REQUEST")[1] == msgid
    worker.send("REPLY", '{"value": null}', msgid)
    assert client.expect("REPLY")[3] == msgid


# -- schedulers -------------------------------------------------------------------


def test_schedule_buffered_until_a_scheduler_informs_then_one_each_and_unschedule_to_all(
    h: Harness,
) -> None:
    client = h.peer("frontend", "client")
    early = client.send("SCHEDULE", "default", "", "60", JOB, "")
    assert client.expect("ACK")[2] == early
    assert h.ask("ROUTER_SHOW_SCHEDULERS")["buffered_schedule_messages"] == 1

    s1 = h.peer("frontend", "sched1")
    inform = s1.send("INFORM", "", "scheduler")
    assert s1.expect("ACK")[2] == inform
    frames = s1.recv_raw()
    assert frames == [b"", b"eMQP/1.0", b"SCHEDULE", early.encode(), b"default", b"",
                      b"60", JOB.encode(), b""]  # fmt: skip
    s2 = h.peer("frontend", "sched2")
    s2.send("INFORM", "", "scheduler")
    s2.expect("ACK")
    assert set(h.ask("ROUTER_SHOW_SCHEDULERS")["connected_schedulers"]) == {
        s1.identity.decode(),
        s2.identity.decode(),
    }

    a = client.send("SCHEDULE", "default", "", "-1", JOB, "*/5 * * * *")
    b = client.send("SCHEDULE", "default", "nohaste", "30", JOB, "")
    assert {client.expect("ACK")[2], client.expect("ACK")[2]} == {a, b}
    got = {s1.expect("SCHEDULE")[1], s2.expect("SCHEDULE")[1]}
    assert got == {a, b}

    gone = client.send("UNSCHEDULE", "default", "", JOB)
    assert client.expect("ACK")[2] == gone
    assert s1.expect("UNSCHEDULE")[1] == gone
    assert s2.expect("UNSCHEDULE")[1] == gone


def test_unschedule_buffered_while_no_scheduler(h: Harness) -> None:
    client = h.peer("frontend", "client")
    gone = client.send("UNSCHEDULE", "default", "", "-1", JOB, "")
    client.expect("ACK")
    scheduler = h.peer("frontend", "sched")
    scheduler.send("INFORM", "", "scheduler")
    scheduler.expect("ACK")
    assert scheduler.expect("UNSCHEDULE")[1] == gone


def test_scheduler_kbai_forgets_it(h: Harness) -> None:
    scheduler = h.peer("frontend", "sched")
    scheduler.send("INFORM", "", "scheduler")
    scheduler.expect("ACK")
    scheduler.send("KBYE")
    wait_for(lambda: not h.ask("ROUTER_SHOW_SCHEDULERS")["connected_schedulers"])


def test_a_schedulers_requests_count_as_its_heartbeat(
    start_router: Callable[..., Harness], caplog: pytest.LogCaptureFixture
) -> None:
    """Any message but DISCONNECT is a heartbeat (the spec): a scheduler that only
    fires REQUESTs stays registered over several timeouts, while one that says
    nothing is dropped; the dropped one's HEARTBEAT registers it again."""
    timeout = 0.5
    h = start_router(heartbeat_interval=0.2, heartbeat_timeout=timeout)
    busy, quiet = h.peer("frontend", "busy"), h.peer("frontend", "quiet")
    for scheduler in (busy, quiet):
        scheduler.send("INFORM", "", "scheduler")
        scheduler.expect("ACK")

    def connected() -> set[str]:
        return set(h.ask("ROUTER_SHOW_SCHEDULERS")["connected_schedulers"])

    until: list[float] = []

    def firing() -> bool:
        h.request(busy)
        names = connected()
        assert busy.identity.decode() in names, "the busy scheduler was dropped"
        if not until and quiet.identity.decode() not in names:
            # A timeout has passed; fire for three more.
            until.append(time.monotonic() + 3 * timeout)
        return bool(until) and time.monotonic() > until[0]

    wait_for(firing, 20, "three heartbeat timeouts of REQUESTs", poll=0.05)
    assert h.ask("STATUS")["heartbeats_missed"] == 1
    quiet.send("HEARTBEAT", "1.0")
    wait_for(lambda: quiet.identity.decode() in connected(), what="the quiet one taken back")
    assert any("registered again: a HEARTBEAT without INFORM" in w for w in warnings(caplog))


# -- heartbeats and dead workers ----------------------------------------------------


def test_silent_worker_is_dropped_and_its_jobs_handed_out_again(
    start_router: Callable[..., Harness], caplog: pytest.LogCaptureFixture
) -> None:
    h = start_router(heartbeat_interval=0.2, heartbeat_timeout=0.5)
    caplog.set_level(logging.INFO, logger=ROUTER_LOG)
    doomed = h.worker("doomed", ready=2)
    client = h.peer("frontend", "client")
    first = h.request(client, headers="guarantee,reply-requested")
    second = h.request(client)  # without guarantee too: every accepted job is kept
    assert {doomed.expect("REQUEST")[1], doomed.expect("REQUEST")[1]} == {first, second}
    # The router heartbeats a peer it has been quiet towards...
    beat = doomed.expect("HEARTBEAT")
    assert float(beat[2]) > 0
    # ... and drops it after heartbeat_timeout of silence from it.
    wait_for(lambda: h.slots(doomed) is None, what="the silent worker to be dropped")
    drops = [w for w in warnings(caplog) if "dropped" in w]
    assert len(drops) == 1
    assert doomed.identity.decode() in drops[0]
    assert "2 in-flight job(s) handed out again" in drops[0]
    status = h.ask("STATUS")
    assert status["waiting_messages_by_queue"] == {"default": 2}
    assert status["requeued_messages"] == 2
    assert "lost_messages" not in status  # the router gives no job up: requeued, or poisoned

    rescuer = h.peer("backend", "rescuer")
    rescuer.send("INFORM", "", "worker")
    rescuer.expect("ACK")
    rescuer.send("READY")
    assert rescuer.expect("REQUEST")[1] == first  # back at the front, in order
    rescuer.send("REPLY", '{"value": 1}', first)
    assert client.expect("REPLY")[3] == first
    rescuer.send("READY")
    assert rescuer.expect("REQUEST")[1] == second


def test_heartbeats_keep_a_worker_alive(start_router: Callable[..., Harness]) -> None:
    h = start_router(heartbeat_interval=0.2, heartbeat_timeout=0.5)
    worker = h.worker("alive")
    beats = 0

    def answered_three_beats() -> bool:
        nonlocal beats
        if worker.pending() and worker.expect("HEARTBEAT")[0] == "HEARTBEAT":
            worker.send("HEARTBEAT", "1.0")
            beats += 1
        return beats >= 3

    wait_for(answered_three_beats, what="three heartbeats")
    assert h.slots(worker) == 1


def test_worker_kbai_forgets_it_quietly(h: Harness, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=ROUTER_LOG)
    worker = h.worker("leaving")
    worker.send("KBYE")
    wait_for(lambda: h.slots(worker) is None)
    worker.send("READY")  # a finishing job manager may still say READY
    worker.send("INFORM", "", "worker")
    worker.expect("ACK")
    assert warnings(caplog) == []


def test_worker_informing_again_is_reset(h: Harness) -> None:
    worker = h.worker("w", ready=2)
    worker.send("INFORM", '[[10, "email"]]', "worker")
    worker.expect("ACK")
    info = h.ask("ROUTER_SHOW_WORKERS")
    assert info["connected_workers"][worker.identity.decode()]["available_slots"] == 0
    assert info["connected_workers"][worker.identity.decode()]["queues"] == [[10, "email"]]


# -- admin --------------------------------------------------------------------------


def test_admin_json_shapes(h: Harness) -> None:
    empty = h.ask("STATUS")
    for key in (
        "inflight_messages_by_queue",
        "latency_messages_by_queue",
        "max_latency_messages_by_queue",
        "waiting_messages_by_queue",
        "processed_messages_by_queue",
        "processed_messages_by_worker",
    ):
        assert empty[key] == {}
    assert h.ask("ROUTER_SHOW_WORKERS") == {"connected_workers": {}, "connected_queues": {}}
    assert h.ask("ROUTER_SHOW_SCHEDULERS")["connected_schedulers"] == {}

    worker = h.worker("w", '[[10, "default"], [30, "email"]]', ready=2)
    client = h.peer("frontend", "client")
    h.request(client)
    worker.expect("REQUEST")
    status = h.ask("STATUS")
    assert status["inflight_messages_by_queue"] == {"default": 1}
    assert status["latency_messages_by_queue"]["default"] >= 0
    assert status["max_latency_messages_by_queue"]["default"] >= 0
    shown = h.ask("ROUTER_SHOW_WORKERS")
    name = worker.identity.decode()
    assert shown["connected_workers"][name]["queues"] == [[10, "default"], [30, "email"]]
    assert shown["connected_workers"][name]["available_slots"] == 1
    assert isinstance(shown["connected_workers"][name]["hb"], float)
    assert shown["connected_queues"] == {"default": [[10, name]], "email": [[30, name]]}

    scheduler = h.peer("frontend", "sched")
    scheduler.send("INFORM", "", "scheduler")
    scheduler.expect("ACK")
    schedulers = h.ask("ROUTER_SHOW_SCHEDULERS")["connected_schedulers"]
    assert list(schedulers) == [scheduler.identity.decode()]
    assert isinstance(schedulers[scheduler.identity.decode()]["hb"], float)


def test_admin_disconnect_says_kbai_to_everyone_and_stops(h: Harness) -> None:
    worker = h.worker("w")
    scheduler = h.peer("frontend", "sched")
    scheduler.send("INFORM", "", "scheduler")
    scheduler.expect("ACK")
    msgid = h.admin.send("DISCONNECT", h.token_frame())
    assert h.admin.expect("ACK")[2] == msgid
    worker.expect("KBAI")
    scheduler.expect("KBAI")
    h.thread.join(10)
    assert not h.thread.is_alive()
