"""Packed messages between our peers: the router, our job manager's link and our client.

The codec side is in tests/protocol/test_packed.py; the job manager's side
in tests/jobmanager/test_modes.py.
"""

from __future__ import annotations

import json

import pytest

from django_eventmq.client.connection import DRAIN_EVERY, Client
from django_eventmq.errors import BrokerUnavailable
from django_eventmq.protocol import Ack, Request, decode
from django_eventmq.protocol.packed import pack, pack_request
from tests.fake_router import ScriptedRouter
from tests.router.test_router import JOB
from tests.support import wait_for

V = b"eMQP/1.0"
JOB_B = JOB.encode()


def _monitor(h) -> dict:  # type: ignore[no-untyped-def, type-arg]
    return h.ask("MONITOR")  # type: ignore[no-any-return]


# -- the router ----------------------------------------------------------------------


def test_a_packed_request_is_stored_and_acked_packed_and_a_plain_one_plain(start_router) -> None:
    h = start_router()
    client = h.peer("frontend", "client")
    client.send_raw([pack_request(b"m-packed", b"default", b"", JOB_B)])
    raw = client.recv_raw()
    assert len(raw) == 1, raw  # the ACK comes in the form the REQUEST came in
    ack = decode(raw)
    assert isinstance(ack, Ack) and ack.ack_msgid == "m-packed"
    h.request(client)  # plain REQUEST, plain ACK (expect checks the frames)
    assert _monitor(h)["queued"] == 2


def test_a_packed_request_is_the_same_request_to_the_worker_that_runs_it(start_router) -> None:
    h = start_router()
    # Says nothing of packed: gets plain frames (asking for a reply, as a job manager
    # that does not speak DONE is asked: its REPLY names the job that ended).
    worker = h.worker("plain-jm")
    client = h.peer("frontend", "client")
    client.send_raw([pack_request(b"m-1", b"default", b"guarantee", JOB_B)])
    frames = worker.recv_raw()
    while frames[2] != b"REQUEST":  # HEARTBEATs
        frames = worker.recv_raw()
    headers = b"guarantee,reply-requested"
    assert frames == [b"", V, b"REQUEST", b"m-1", b"default", headers, JOB_B]


def test_jobs_go_packed_to_a_worker_that_reads_them_and_its_packed_done_is_taken(
    start_router,
) -> None:
    h = start_router()
    worker = h.peer("backend", "packed-jm")
    inform = worker.send("INFORM", "", "worker")
    assert worker.expect("ACK")[2] == inform
    assert json.loads(worker.expect("FEATURES")[2])["packed"] == 1  # the router reads them
    worker.send("FEATURES", '{"done": 1, "packed": 1}')
    worker.send_raw([pack([b"", V, b"READY", b"r-1"])])
    wait_for(lambda: h.slots(worker) == 1, what="the packed READY to give a slot")

    client = h.peer("frontend", "client")
    msgid = h.request(client)
    raw = worker.recv_raw()
    while len(raw) != 1:  # HEARTBEATs are plain
        raw = worker.recv_raw()
    job = decode(raw)
    assert isinstance(job, Request) and job.msgid == msgid and job.body_text == JOB
    assert _monitor(h)["in_flight"] == 1

    worker.send_raw([pack([b"", V, b"DONE", b"d-1", msgid.encode(), b"ok", b'{"value":1}'])])
    wait_for(lambda: _monitor(h)["in_flight"] == 0, what="the packed DONE to finish the job")
    assert h.slots(worker) == 1  # and to free its slot


# -- our client --------------------------------------------------------------------


def _router_that_reads_packed(frames: list[bytes], n: int) -> list[list[bytes]]:
    if frames[2:3] == [b"FEATURES"]:
        return [[b"", V, b"FEATURES", b"f-1", b'{"batch":1,"packed":1}']]
    return []


def _client_that_heard_features(addr: str) -> Client:
    """A client that sent job m-0 (plain) and has read the router's FEATURES answer."""
    client = Client(addr)
    client.send_request_frames(b"m-0", b"default", b"", JOB_B)
    wait_for(lambda: client.drain() >= 0 and client.router_features is not None)
    return client


def test_a_client_packs_its_requests_once_the_router_says_it_reads_them() -> None:
    with ScriptedRouter(_router_that_reads_packed, features_aside=False) as router:
        client = _client_that_heard_features(router.addr)
        try:
            client.send_request_frames(b"m-1", b"default", b"x", JOB_B)
            wait_for(lambda: len(router.received) == 3, what="FEATURES and two REQUESTs")
        finally:
            client.close()
    features, first, second = router.received
    assert features[2] == b"FEATURES" and json.loads(features[4])["packed"] == 1
    assert first == [b"", V, b"REQUEST", b"m-0", b"default", b"", JOB_B]  # before the answer
    assert len(second) == 1  # after it: one frame
    assert decode(second) == Request.from_body("m-1", ["default", "x", JOB])


def test_a_client_never_packs_for_a_router_that_does_not_answer_features() -> None:
    # As the reference router: FEATURES is ignored, so REQUESTs stay plain.
    count = DRAIN_EVERY + 10
    with ScriptedRouter(lambda frames, n: []) as router:
        client = Client(router.addr)
        try:
            for i in range(count):
                client.send_request_frames(f"m-{i}".encode(), b"default", b"", JOB_B)
            wait_for(lambda: len(router.received) == count, what=f"{count} REQUESTs")
        finally:
            client.close()
    assert len(router.features) == 1  # it did ask
    assert all(len(frames) == 7 and frames[2] == b"REQUEST" for frames in router.received)


def test_a_client_whose_packed_job_gets_no_ack_asks_the_router_again() -> None:
    # Whoever serves the address may no longer be the router that said "packed".
    with ScriptedRouter(_router_that_reads_packed, features_aside=False) as router:
        client = _client_that_heard_features(router.addr)
        try:
            with pytest.raises(BrokerUnavailable, match="did not acknowledge job m-1"):
                client.send_request_guaranteed(
                    b"m-1", b"default", b"guarantee", JOB_B, ack_timeout=0.05, retries=1
                )
            assert client.router_features is None  # REQUESTs go plain again
            wait_for(
                lambda: [f[2] for f in router.received if len(f) > 2].count(b"FEATURES") == 2,
                what="the client's second FEATURES",
            )
        finally:
            client.close()
    sent_m1 = [f for f in router.received if len(f) == 1 and decode(f).msgid == "m-1"]
    assert len(sent_m1) == 2  # sent packed, then once more with the same msgid


def test_a_guaranteed_job_sent_packed_returns_on_the_routers_packed_ack(start_router) -> None:
    h = start_router()
    client = _client_that_heard_features(h.router.frontend_address)
    try:
        for i in range(1, 3):  # ACKs nobody waits for, packed or not, are skipped
            client.send_request_frames(f"m-{i}".encode(), b"default", b"", JOB_B)
        client.send_request_guaranteed(
            b"m-sure", b"default", b"guarantee", JOB_B, ack_timeout=5.0, retries=0
        )
        assert client.session.send_packed
        assert _monitor(h)["queued"] == 4
    finally:
        client.close()
