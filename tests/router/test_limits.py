"""The router's limits (MAX_BODY_BYTES, header bounds, MAX_FRAMES): a client's message
outside them gets REJECT with the reason, is warned about once, and the router goes on."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from django_eventmq.protocol import JobBody
from django_eventmq.protocol.batch import pack_jobs
from django_eventmq.runtime.admin_client import ask
from tests.router.test_router import JOB, ROUTER_LOG, Harness, Peer, make_settings, warnings
from tests.support import Proc, python_module, wait_for
from tests.system.ops.conftest import start_router as router_process

#: Small enough that a test body is over it; the default job body is well under it.
BODY_LIMIT = 1000
BIG_JOB = '["run", {"path": "vjobs", "callable": "hello", "args": ["' + "x" * BODY_LIMIT + '"]}]'
V = b"eMQP/1.0"


@pytest.fixture
def h(zctx: zmq.Context[Any]) -> Iterator[Harness]:
    harness = Harness(zctx, make_settings(max_body_bytes=BODY_LIMIT, max_retry_count=5))
    yield harness
    harness.close()


def still_serves(h: Harness, client: Peer) -> None:
    """A job within the limits is ACKed and handed out."""
    worker = h.worker(f"worker-{len(h.peers)}")
    msgid = h.request(client)
    assert worker.expect("REQUEST")[1] == msgid


@pytest.mark.parametrize(
    ("headers", "body", "reason"),
    [
        ("", BIG_JOB, f"REQUEST body is larger than {BODY_LIMIT} bytes (MAX_BODY_BYTES)"),
        ("retry-count:6", JOB, "REQUEST header retry-count is above 5"),
        ("timeout:700000", JOB, "REQUEST header timeout is above 604800 seconds"),
        ("reply-requested,priority:9999999", JOB, "REQUEST header priority is outside"),
    ],
    ids=["body", "retry-count", "timeout", "priority"],
)
def test_request_over_a_limit_gets_reject_once_warned_and_the_router_serves_on(
    h: Harness, caplog: pytest.LogCaptureFixture, headers: str, body: str, reason: str
) -> None:
    caplog.set_level(logging.DEBUG, logger=ROUTER_LOG)
    client = h.peer("frontend", "client")
    first = client.send("REQUEST", "default", headers, body)
    second = client.send("REQUEST", "default", headers, body)
    for msgid in (first, second):
        reject = client.expect("REJECT")
        assert reject[1] != msgid
        assert reject[2] == msgid
        assert reject[3].startswith(reason)
    said = warnings(caplog)
    assert len(said) == 1, said  # once per peer and reason
    assert reason in said[0] and client.identity.decode() in said[0] and first in said[0]
    assert h.ask("MONITOR")["rejected"] == 2
    assert h.ask("STATUS")["waiting_messages_by_queue"] == {}
    still_serves(h, client)


def test_schedule_over_the_body_limit_gets_reject_and_is_not_forwarded(h: Harness) -> None:
    scheduler = h.peer("frontend", "sched")
    scheduler.send("INFORM", "", "scheduler")
    scheduler.expect("ACK")
    client = h.peer("frontend", "client")
    msgid = client.send("SCHEDULE", "default", "", "60", BIG_JOB, "")
    reject = client.expect("REJECT")
    assert reject[2] == msgid and "SCHEDULE body is larger" in reject[3]
    assert not scheduler.pending()
    assert h.ask("ROUTER_SHOW_SCHEDULERS")["buffered_schedule_messages"] == 0
    still_serves(h, client)


def test_too_many_frames_is_dropped_with_one_warning(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    client = h.peer("frontend", "client")
    frames = [b"", V, b"REQUEST", b"id", b"default", b"", JOB.encode(), *([b"x"] * 40)]
    client.send_raw(frames)
    client.send_raw(frames)
    still_serves(h, client)
    said = warnings(caplog)
    assert len(said) == 1 and "frames" in said[0], said
    assert not client.pending()  # no msgid can be trusted: nothing is answered


def test_worker_message_over_a_limit_is_dropped_and_the_worker_kept(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    worker = h.worker("w")
    worker.send_raw([b"", V, b"HEARTBEAT", b"id", *([b"y"] * 40)])
    worker.send_raw([b"", V, b"HEARTBEAT", b"id", *([b"y"] * 40)])
    client = h.peer("frontend", "client")
    msgid = h.request(client)
    assert worker.expect("REQUEST")[1] == msgid
    said = warnings(caplog)
    assert len(said) == 1 and "frames" in said[0] and "backend" in said[0], said


# -- per-queue high-water marks (QUEUE_HIGH_WATER_MARK, policy block) ---------------------
QUEUE_MARK = 20
#: QUEUE_WINDOW, which bounds the jobs held per full queue.
HELD_MAX = 30


def record_job(out: Path, tag: str) -> bytes:
    return (
        JobBody(path="tests.jobs_fixtures.sample", callable="record", args=(str(out), tag))
        .encode()
        .encode()
    )


def dealer(ctx: zmq.Context[Any], frontend: str) -> zmq.Socket[Any]:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(frontend)
    return sock


class Inbox:
    """What a DEALER received, by command."""

    def __init__(self, sock: zmq.Socket[Any]) -> None:
        self.sock = sock
        self.got: dict[bytes, list[list[bytes]]] = {}

    def wait(self, command: bytes, n: int) -> list[list[bytes]]:
        """The first ``n`` messages ``command``, once received."""

        def enough() -> bool:
            while self.sock.poll(20):
                frames = self.sock.recv_multipart()
                self.got.setdefault(frames[2], []).append(frames)
            return len(self.got.get(command, [])) >= n

        wait_for(enough, 30, f"{n} {command.decode()}s (got {len(self.got.get(command, []))})")
        return self.got[command][:n]


def test_a_flooded_unserved_queue_holds_back_only_its_own_jobs(tmp_path: Path) -> None:
    """One client floods a queue no job manager serves, past its mark, without waiting
    for ACKs; another client's jobs for a served queue are acknowledged and run
    meanwhile (the global mark would be reached without the queue's mark). The
    flooded queue's jobs past its mark are held unacknowledged, up to QUEUE_WINDOW,
    then refused with REJECT; once a job manager serves it, the held ones are
    accepted and run."""
    out = tmp_path / "ran.txt"
    router, (frontend, backend, admin) = router_process(
        env={
            "EMQ_HIGH_WATER_MARK": "60",
            "EMQ_QUEUE_HIGH_WATER_MARK": str(QUEUE_MARK),
            "EMQ_QUEUE_WINDOW": str(HELD_MAX),
        }
    )
    ctx = zmq.Context()
    managers = []
    try:
        managers.append(jobmanager(backend, "served"))
        flooder, other = Inbox(dealer(ctx, frontend)), Inbox(dealer(ctx, frontend))
        for n in range(100):
            flooder.sock.send_multipart(
                [b"", V, b"REQUEST", b"f-%d" % n, b"stuck", b"guarantee", record_job(out, "stuck")]
            )
        rejects = flooder.wait(b"REJECT", 100 - QUEUE_MARK - HELD_MAX)
        assert all(b"queue stuck is over its high-water mark" in r[5] for r in rejects)
        monitor = ask(admin, "MONITOR")
        assert monitor["held"] == {"stuck": HELD_MAX} and not monitor["blocked"]
        assert ask(admin, "STATUS")["waiting_messages_by_queue"]["stuck"] == QUEUE_MARK

        for n in range(3):
            other.sock.send_multipart(
                [b"", V, b"REQUEST", b"o-%d" % n, b"served", b"guarantee", record_job(out, "ok")]
            )
        assert {a[4] for a in other.wait(b"ACK", 3)} == {b"o-0", b"o-1", b"o-2"}
        wait_for(lambda: ran(out).count("ok") == 3, 30, "the served queue's jobs to run")
        # The flooder got ACKs for the jobs stored, none for the ones held.
        acked = {a[4] for a in flooder.wait(b"ACK", QUEUE_MARK)}
        assert acked == {b"f-%d" % n for n in range(QUEUE_MARK)}

        managers.append(jobmanager(backend, "stuck"))
        acked = {a[4] for a in flooder.wait(b"ACK", QUEUE_MARK + HELD_MAX)}
        assert acked == {b"f-%d" % n for n in range(50)}
        wait_for(lambda: ran(out).count("stuck") == 50, 30, "the stuck queue's jobs to run")
        assert ask(admin, "MONITOR")["held"] == {}
    finally:
        for manager in managers:
            manager.stop()
        ctx.destroy(linger=0)
        router.stop()


def jobmanager(backend: str, queue: str) -> Proc:
    proc = Proc(
        python_module(
            "jobmanager", "--broker", backend, "--queues", queue, "--concurrency", "1",
            "--job-module", "tests.jobs_fixtures.sample",
        )
    )  # fmt: skip
    proc.wait_output(r"jobmanager connected")
    return proc


def ran(out: Path) -> list[str]:
    return [line.split()[0] for line in out.read_text().splitlines()] if out.exists() else []


def test_a_batch_for_a_full_queue_is_held_whole_while_other_queues_are_served(
    start_router: Callable[..., Harness],
) -> None:
    h = start_router(queue_high_water_mark=2, queue_window=10)
    client = h.peer("frontend", "client")
    for _ in range(2):
        h.request(client, "stuck")
    jobs = [(b"b-%d" % i, b"stuck", b"", JOB.encode()) for i in range(3)]
    client.send_raw([b"", V, b"BATCH", b"batch-1", pack_jobs(jobs)])
    # No ACK for the batch; the same client's job for another queue is ACKed.
    h.request(client, "default")
    assert h.ask("MONITOR")["held"] == {"stuck": 3}
    assert h.ask("STATUS")["waiting_messages_by_queue"]["stuck"] == 2

    worker = h.worker("w", '[[10, "stuck"]]', ready=0)
    for _ in range(5):
        worker.send("READY")
    assert client.expect("ACK")[2] == "batch-1"
    handed = {worker.expect("REQUEST")[1] for _ in range(5)}
    assert handed >= {"b-0", "b-1", "b-2"}
    assert h.ask("MONITOR")["held"] == {}


def test_a_held_job_sent_again_is_held_still_not_refused(
    start_router: Callable[..., Harness],
) -> None:
    """A sender whose ACK is late sends the job again. While its queue holds all it
    may (QUEUE_WINDOW), that copy must not be answered REJECT: the job is held
    and will be accepted and run, so the sender would be told wrong."""
    h = start_router(queue_high_water_mark=2, queue_window=1)
    client = h.peer("frontend", "client")
    for _ in range(2):
        h.request(client, "stuck")
    held = [b"", V, b"REQUEST", b"held-1", b"stuck", b"guarantee", JOB.encode()]
    client.send_raw(held)
    wait_for(lambda: h.ask("MONITOR")["held"] == {"stuck": 1}, what="the job to be held")
    client.send_raw(held)  # sent again: its REJECT would come before the next ACK
    h.request(client, "default")
    assert h.ask("MONITOR")["held"] == {"stuck": 1}

    worker = h.worker("w", '[[10, "stuck"]]', ready=0)
    for _ in range(3):
        worker.send("READY")
    assert client.expect("ACK")[2] == "held-1"


def test_held_jobs_are_accepted_when_released_though_a_batch_passed_the_bound(
    start_router: Callable[..., Harness],
) -> None:
    """A BATCH held last may take its queue's held jobs past QUEUE_WINDOW. Once
    the queue has room, every held job is accepted, in order: the one released
    first, while the others still count past the bound, is not refused."""
    h = start_router(queue_high_water_mark=2, queue_window=2)
    client = h.peer("frontend", "client")
    for _ in range(2):
        h.request(client, "stuck")
    single = client.send("REQUEST", "stuck", "guarantee", JOB)
    jobs = [(b"b-%d" % i, b"stuck", b"", JOB.encode()) for i in range(3)]
    client.send_raw([b"", V, b"BATCH", b"batch-1", pack_jobs(jobs)])
    wait_for(lambda: h.ask("MONITOR")["held"] == {"stuck": 4}, what="the jobs to be held")

    worker = h.worker("w", '[[10, "stuck"]]', ready=0)
    for _ in range(6):
        worker.send("READY")
    assert client.expect("ACK")[2] == single
    assert client.expect("ACK")[2] == "batch-1"
    assert h.ask("MONITOR")["held"] == {}
