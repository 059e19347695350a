"""OUR pipelined sender -> the REFERENCE router: FEATURES is ignored, REQUESTs go on.

Our pipeline opens with FEATURES (asking for BATCH) and sends plain REQUESTs
until a router of ours answers. The reference router must neither die on
that FEATURES nor answer it, and must serve the REQUESTs that follow.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import zmq

from django_eventmq.client.connection import Client
from django_eventmq.protocol import encode_json
from tests.support import Proc, wait_for

from .conftest import (
    INTEROP,
    OUR_DEADLINE,
    RECORD_JOB,
    Admin,
    Router,
    read_records,
    wait_records,
    without_pid,
)

pytestmark = INTEROP

V = b"eMQP/1.0"


def record_body(out: Path, *args: Any) -> bytes:
    module, _, name = RECORD_JOB.rpartition(".")
    job = [
        "run",
        {"path": module, "callable": name, "args": list(args), "kwargs": {"out": str(out)}},
    ]
    return encode_json(job).encode()


def wait_free_slots(admin: Admin, slots: int = 2) -> None:
    """Wait for free slots: the reference sends a receipt only for a REQUEST it forwards
    at once (a buffered one gets nothing, and our sender would send it again)."""
    wait_for(lambda: admin.free_slots() >= slots, OUR_DEADLINE, f"{slots} free slot(s)")


def test_features_on_its_frontend_is_ignored_and_the_next_request_served(
    reference_router_stack: tuple[Router, Proc], records_file: Path
) -> None:
    router, _ = reference_router_stack
    admin = router.admin()
    wait_free_slots(admin)
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.IDENTITY, f"client-{uuid.uuid4()}".encode())
    try:
        sock.connect(router.frontend)
        sock.send_multipart([b"", V, b"FEATURES", str(uuid.uuid4()).encode(), b'{"batch":1}'])
        msgid = str(uuid.uuid4()).encode()
        body = record_body(records_file, "after FEATURES")
        sock.send_multipart([b"", V, b"REQUEST", msgid, b"default", b"", body])
        assert sock.poll(int(OUR_DEADLINE * 1000)), "no receipt for the REQUEST after FEATURES"
        # It answers in order: an answer to FEATURES would have come first.
        frames = sock.recv_multipart()
        assert frames[2:3] == [b"REPLY"] and frames[-1] == msgid, frames
    finally:
        sock.close(linger=0)
    assert without_pid(wait_records(records_file)) == [{"args": ["after FEATURES"], "kwargs": {}}]
    assert router.alive()
    assert "Traceback" not in router.proc.output()


def test_our_send_many_falls_back_to_requests(
    reference_router_stack: tuple[Router, Proc], records_file: Path
) -> None:
    router, _ = reference_router_stack
    admin = router.admin()
    client = Client(router.frontend)
    try:
        for n in range(3):
            wait_free_slots(admin)
            job = (
                str(uuid.uuid4()).encode(),
                b"default",
                b"guarantee",
                record_body(records_file, n),
            )
            result = client.send_many([job], ack_timeout=30.0, give_up=30.0)
            assert (result.sent, result.acked, result.batches) == (1, 1, 0)
        # Never answered: every send_many asked again, and sent REQUESTs.
        assert client.router_features is None
    finally:
        client.close()
    records = wait_records(records_file, 3)
    assert sorted(r["args"][0] for r in records) == [0, 1, 2]
    assert len(read_records(records_file)) == 3  # each ran once
    assert router.alive()
    assert "Traceback" not in router.proc.output()


def test_our_spark_sender_waits_for_features_then_sends_requests(
    reference_router_stack: tuple[Router, Proc], records_file: Path
) -> None:
    """The Spark sender holds its first jobs for a FEATURES answer (FEATURES_WAIT);
    the reference never answers, so it sends the first job alone, then the rest,
    all as REQUESTs, and each is answered (its receipt) and runs once."""
    from django_eventmq.contrib.spark.sender import PipelinedSender

    router, _ = reference_router_stack
    wait_free_slots(router.admin())
    with PipelinedSender(router.frontend, ack_timeout=30.0, give_up=30.0) as sender:
        for n in range(2):
            sender.send(str(uuid.uuid4()).encode(), b"default", b"", record_body(records_file, n))
        sender.flush()
    counts = sender.counts["default"]
    assert (counts.sent, counts.acked, counts.resent) == (2, 2, 0)
    assert sender.router_features is None and not sender.batching
    records = wait_records(records_file, 2)
    assert sorted(r["args"][0] for r in records) == [0, 1]
    assert len(read_records(records_file)) == 2
    assert router.alive()
