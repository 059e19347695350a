"""Bundles on the router's backend: jobs one turn hands out to a job manager that
reads them go as one bundle; what a job manager bundles is taken message by message.

The codec is tested in tests/protocol/test_bundle.py; the job manager's side in
tests/jobmanager/test_bundles.py.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import zmq

from django_eventmq.protocol import Request, decode
from django_eventmq.protocol.bundle import bundle, is_bundle, unbundle
from django_eventmq.protocol.packed import PREFIX as PACKED_PREFIX
from django_eventmq.runtime import transport
from tests.router.test_robustness import Stepped
from tests.router.test_router import JOB, Harness, Peer
from tests.support import wait_for

V = b"eMQP/1.0"


def _ready(n: int) -> list[bytes]:
    return [b"", V, b"READY", f"r-{n}".encode()]


def _done(msgid: str, n: int) -> list[bytes]:
    return [b"", V, b"DONE", f"d-{n}".encode(), msgid.encode(), b"ok", b'{"value":1}']


def _informed(h: Harness, name: str, features: dict[str, int] | None) -> Peer:
    """A job manager that INFORMed and answered FEATURES with ``features`` (None: as
    the reference job manager, no answer), with no slot yet."""
    worker = h.peer("backend", name)
    inform = worker.send("INFORM", "", "worker")
    assert worker.expect("ACK")[2] == inform
    # The router reads them, up to what its socket takes (MAXMSGSIZE).
    assert json.loads(worker.expect("FEATURES")[2])["bundle"] == h.router.settings.max_message_bytes
    if features is not None:
        worker.send("FEATURES", json.dumps(features))
    return worker


def _queued(h: Harness, count: int) -> list[str]:
    client = h.peer("frontend", "client")
    return [h.request(client) for _ in range(count)]


def _next_job_message(worker: Peer) -> list[bytes]:
    """The next message that is not a HEARTBEAT (those go plain)."""
    raw = worker.recv_raw()
    while len(raw) > 2 and raw[2] == b"HEARTBEAT":
        raw = worker.recv_raw()
    return raw


def _client_answered(stepped: Stepped, name: bytes, features: dict[str, int]) -> Peer:
    """A client that sent FEATURES ``features`` and read the router's answer."""
    client = stepped.peer(stepped.router.frontend_address, name)
    client.send("FEATURES", json.dumps(features))
    stepped.until(client.pending, "the answer to its FEATURES")
    client.expect("FEATURES")
    return client


def _monitor(h: Harness) -> dict[str, Any]:
    return h.ask("MONITOR")


def test_the_jobs_one_turn_hands_out_go_as_one_bundle_and_bundled_dones_are_taken(
    start_router,
) -> None:
    h = start_router()
    worker = _informed(h, "bundling-jm", {"done": 1, "packed": 1, "bundle": 1 << 20})
    msgids = _queued(h, 3)
    worker.send_raw([bundle([_ready(1), _ready(2), _ready(3)])])  # three slots in one turn
    raw = _next_job_message(worker)
    assert len(raw) == 1 and is_bundle(raw[0]), raw
    jobs = [decode(frames) for frames in unbundle(raw[0])]
    assert all(isinstance(job, Request) for job in jobs)
    assert [job.msgid for job in jobs] == msgids  # in the order they were handed out
    assert _monitor(h)["in_flight"] == 3

    worker.send_raw([bundle([_done(m, i) for i, m in enumerate(msgids)])])
    wait_for(lambda: _monitor(h)["in_flight"] == 0, what="the bundled DONEs to finish the jobs")
    assert h.slots(worker) == 3  # each DONE freed its slot


@pytest.mark.parametrize(
    ("features", "packed"),
    [
        (None, False),  # as the reference job manager: never answers FEATURES
        ({"done": 1}, False),
        ({"done": 1, "packed": 1}, True),
    ],
)
def test_a_job_manager_that_did_not_say_bundle_gets_one_message_per_job(
    start_router, features: dict[str, int] | None, packed: bool
) -> None:
    h = start_router()
    worker = _informed(h, "plain-jm", features)
    msgids = _queued(h, 3)
    # Our router reads a bundle from anyone: three slots in one turn.
    worker.send_raw([bundle([_ready(1), _ready(2), _ready(3)])])
    got = []
    for _ in msgids:
        raw = _next_job_message(worker)
        if packed:
            assert len(raw) == 1 and raw[0].startswith(PACKED_PREFIX), raw
        else:
            assert len(raw) == 7 and raw[:3] == [b"", V, b"REQUEST"], raw
        job = decode(raw)
        assert isinstance(job, Request)
        got.append(job.msgid)
    assert got == msgids


def test_a_malformed_bundle_is_logged_once_and_dropped_and_the_next_one_is_read(
    start_router, caplog: pytest.LogCaptureFixture
) -> None:
    h = start_router()
    worker = _informed(h, "jm", {"done": 1, "bundle": 1 << 20})
    caplog.set_level(logging.WARNING, logger="django_eventmq")
    # Its second message has no frames: nothing of it is taken, not even the READY.
    worker.send_raw([b"B2,4,0,8,5,3\neMQP/1.0READYr-1"])
    worker.send_raw([b"B2,4,0,8,5,3\neMQP/1.0READYr-1"])
    # Well-formed, with one message that is not (a version we do not speak): that
    # one is refused as it would be alone, the other READY is taken.
    worker.send_raw([bundle([[b"", b"eMQP/0.9", b"READY", b"r-2"], _ready(3)])])
    wait_for(lambda: h.slots(worker) == 1, what="the good READY of the second bundle")
    bundle_warnings = [
        r.getMessage() for r in caplog.records if "malformed bundle" in r.getMessage()
    ]
    assert len(bundle_warnings) == 1, bundle_warnings
    assert "a message must have 1 to 32 frames" in bundle_warnings[0]
    assert any("unsupported protocol version" in r.getMessage() for r in caplog.records)


# -- a job manager that cannot take a bundle (the router is stepped in this thread) ------


@pytest.fixture
def stepped(zctx: zmq.Context[Any]) -> Iterator[Stepped]:
    s = Stepped(zctx)
    yield s
    s.close()


def _bundling_worker(stepped: Stepped, name: bytes, slots: int) -> Peer:
    router = stepped.router
    worker = stepped.peer(router.backend_address, name)
    worker.send("INFORM", "", "worker")
    worker.send("FEATURES", '{"done": 1, "packed": 1, "bundle": 1048576}')
    workers = router.routing.workers
    stepped.until(lambda: name in workers and workers[name].session.bundle, "its FEATURES")
    return worker


def _hand_out(stepped: Stepped, worker: Peer, count: int) -> list[str]:
    """``count`` jobs queued, then as many slots in one READY bundle."""
    router = stepped.router
    client = stepped.peer(router.frontend_address, b"client")
    msgids = [client.send("REQUEST", "default", "", JOB) for _ in range(count)]
    stepped.until(lambda: router.routing.waiting.total() == count, "the jobs queued")
    worker.send_raw([bundle([_ready(i) for i in range(count)])])
    return msgids


def test_a_bundle_the_job_manager_cannot_take_now_puts_its_jobs_back_to_wait(
    stepped: Stepped, monkeypatch: pytest.MonkeyPatch
) -> None:
    router = stepped.router
    worker = _bundling_worker(stepped, b"full", 3)
    real_send = router.backend.send_frames
    refused: list[int] = []

    def send_frames(frames: list[bytes], *, flags: int = 0) -> None:
        if len(frames) == 2 and is_bundle(frames[1]) and not refused:
            refused.append(len(unbundle(frames[1])))
            raise transport.Again()
        real_send(frames, flags=flags)

    monkeypatch.setattr(router.backend, "send_frames", send_frames)
    msgids = _hand_out(stepped, worker, 3)
    stepped.until(lambda: refused, "the bundle to be refused")
    assert refused == [3]
    # Undone as a job that could not be sent is: waiting again, its slot kept...
    stepped.until(lambda: worker.pending(), "the jobs to go out again")
    got: list[str] = []
    while len(got) < 3:
        raw = _next_job_message(worker)
        got += [decode(f).msgid for f in unbundle(raw[0])] if is_bundle(raw[0]) else []
        if len(got) < 3:
            stepped.until(worker.pending, "the rest of the jobs")
    assert got == msgids  # ...and sent again, in order, once it takes them


def test_an_unreachable_job_manager_gets_its_bundled_jobs_back_to_wait(
    stepped: Stepped, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    router = stepped.router
    worker = _bundling_worker(stepped, b"vanishing", 3)

    def send_frames(frames: list[bytes], *, flags: int = 0) -> None:
        raise zmq.ZMQError(zmq.EHOSTUNREACH)

    msgids = _hand_out(stepped, worker, 3)
    monkeypatch.setattr(router.backend, "send_frames", send_frames)
    stepped.until(lambda: b"vanishing" not in router.routing.workers, "the worker dropped")
    monkeypatch.undo()
    assert [j.msgid for j in router.routing.waiting["default"]] == msgids
    assert not router.routing.inflight
    assert any("vanishing dropped (unreachable)" in r.getMessage() for r in caplog.records)


# -- ACKs to a client that reads bundles ---------------------------------------------


def test_the_acks_one_commit_releases_go_as_one_bundle_to_a_client_that_reads_them(
    stepped: Stepped,
) -> None:
    router = stepped.router
    # Connected once answered: the router can route to them.
    reader = _client_answered(stepped, b"bundle-reader", {})
    other = _client_answered(stepped, b"plain-client", {})
    router.commits.reads_bundles(b"bundle-reader", 1 << 20)
    router.commits.acks = [
        (b"bundle-reader", b"m-1", False),
        (b"plain-client", b"m-2", False),
        (b"bundle-reader", b"m-3", True),
    ]
    router.commits.sync(force=True)
    raw = reader.recv_raw()
    assert len(raw) == 1 and is_bundle(raw[0]), raw
    acks = [decode(frames) for frames in unbundle(raw[0])]
    assert [ack.ack_msgid for ack in acks] == ["m-1", "m-3"]  # type: ignore[attr-defined]
    assert other.expect("ACK")[2] == "m-2"  # plain, as ever

    # Alone, an ACK goes in the form its REQUEST came in (a BATCH's reader knows
    # plain ACKs only).
    for msgid, packed in ((b"m-4", True), (b"m-5", False)):
        router.commits.acks = [(b"bundle-reader", msgid, packed)]
        router.commits.sync(force=True)
        raw = reader.recv_raw()
        assert (len(raw) == 1 and raw[0].startswith(PACKED_PREFIX)) is packed, raw
        assert decode(raw).ack_msgid == msgid.decode()  # type: ignore[attr-defined]


def test_the_router_remembers_the_most_recent_clients_that_read_bundles(
    stepped: Stepped, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_eventmq.router import commit_acks

    monkeypatch.setattr(commit_acks, "BUNDLE_CLIENTS", 2)
    router = stepped.router
    for name in (b"a", b"b", b"a", b"c"):
        router.commits.reads_bundles(name, 1 << 20)
    assert list(router.commits._bundle_clients) == [b"a", b"c"]  # b, least recent, forgotten


def test_a_client_whose_features_say_bundle_is_remembered_as_reading_them(
    stepped: Stepped,
) -> None:
    _client_answered(stepped, b"says-bundle", {"packed": 1, "bundle": 65536})
    _client_answered(stepped, b"says-nothing", {"packed": 1})
    _client_answered(stepped, b"says-true", {"packed": 1, "bundle": True})  # no size: none
    assert dict(stepped.router.commits._bundle_clients) == {b"says-bundle": 65536}


def test_the_acks_to_a_client_are_cut_at_the_largest_frame_it_takes(stepped: Stepped) -> None:
    router = stepped.router
    reader = _client_answered(stepped, b"small-reader", {})
    router.commits.reads_bundles(b"small-reader", 400)  # its MAX_MESSAGE_BYTES, lowered
    msgids = [b"m-%d" % n for n in range(40)]
    router.commits.acks = [(b"small-reader", msgid, True) for msgid in msgids]
    router.commits.sync(force=True)
    got: list[str] = []
    while len(got) < len(msgids):
        raw = reader.recv_raw()
        assert len(raw) == 1 and len(raw[0]) <= 400, raw  # else ZeroMQ drops the client
        inner = unbundle(raw[0]) if is_bundle(raw[0]) else [raw]
        got += [decode(frames).ack_msgid for frames in inner]  # type: ignore[attr-defined]
    assert got == [m.decode() for m in msgids]  # all of them, in order
