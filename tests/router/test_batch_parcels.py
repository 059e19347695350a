"""Parcels: a BATCH stored whole (one journal row) while its queue waits on disk.

The router in a thread with raw DEALER peers (as in test_batch_send.py), a
window of 10 jobs in memory so that a queue spills to disk after its first
jobs; a router process killed with SIGKILL for the crash case.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_eventmq.protocol import parse_headers
from django_eventmq.protocol.batch import BatchJob, pack_jobs
from django_eventmq.router.book import Book
from django_eventmq.router.journal.store import MEMORY, WAITING, Journal
from django_eventmq.router.outcomes import CANCELLED_PAYLOAD
from django_eventmq.router.routing import RoutedJob
from tests.client.test_batch_send import (
    BODY,
    jobs,
    rejects,
    request_acked_next,
    send_batch,
    until_ack,
)
from tests.router.test_router import Harness, Peer, make_settings
from tests.support import tcp_addr
from tests.system.chaos.support import admin_call, start_router

WINDOW = 10


def monitor(h: Harness) -> dict[str, Any]:
    return h.ask("MONITOR")


def spilled(start_router: Callable[..., Harness], **settings: Any) -> tuple[Harness, Peer]:
    """A router whose ``email`` queue holds 20 jobs, 10 of them on disk only."""
    h = start_router(queue_window=WINDOW, **settings)
    client = h.peer("frontend", "client")
    until_ack(client, send_batch(client, jobs(20, prefix="first")))
    info = monitor(h)
    assert (info["queued"], info["in_memory"], info["parcels"]) == (20, WINDOW, 0)
    return h, client


def drain(h: Harness, n: int, queues: str = "email") -> list[str]:
    """READY, then DONE for each job as it comes: the msgids of ``n`` jobs in order."""
    worker = h.peer("backend", "jm")
    worker.send("INFORM", queues, "worker")
    worker.expect("ACK")
    worker.expect("FEATURES")
    worker.send("FEATURES", '{"done":1}')
    worker.send("READY")
    got: list[str] = []
    for _ in range(n):
        got.append(worker.expect("REQUEST")[1])
        worker.send("DONE", got[-1], "ok", "{}")
    return got


def names(batch: list[BatchJob]) -> list[str]:
    return [job[0].decode() for job in batch]


def test_a_uniform_batch_behind_a_spilled_queue_is_one_parcel_handed_out_in_order(
    start_router: Callable[..., Harness],
) -> None:
    h, client = spilled(start_router)
    batches = [jobs(300, prefix=f"b{i}") for i in range(3)]
    for batch in batches:
        assert [f[2] for f in until_ack(client, send_batch(client, batch))] == [b"ACK"]
    info = monitor(h)
    assert (info["queued"], info["in_memory"], info["parcels"]) == (920, WINDOW, 3)
    assert info["per_queue"]["email"]["queued"] == 920
    # Each job as the REQUEST it would have been, each once, in acceptance order.
    expected = names(jobs(20, prefix="first")) + [m for b in batches for m in names(b)]
    assert drain(h, 920) == expected
    info = monitor(h)
    assert (info["queued"], info["parcels"], info["duplicates"]) == (0, 0, 0)


def test_a_parcel_is_forwarded_byte_for_byte(start_router: Callable[..., Harness]) -> None:
    h, client = spilled(start_router)
    body = '["run", {"text": "☃ naïve"}]'.encode()
    batch = [(b"snow-%d" % i, b"email", b"retry-count:2,guarantee", body) for i in range(5)]
    until_ack(client, send_batch(client, batch))
    assert monitor(h)["parcels"] == 1
    worker = h.peer("backend", "jm")
    worker.send("INFORM", "email", "worker")
    worker.expect("ACK")
    worker.expect("FEATURES")
    worker.send("FEATURES", '{"done": 1}')  # ours: a REQUEST goes as it was sent
    worker.send("READY")
    for _ in range(20):
        worker.send("DONE", worker.expect("REQUEST")[1], "ok", '{"value": null}')
    frames = worker.recv_raw()
    assert frames[2:] == [b"REQUEST", b"snow-0", b"email", b"retry-count:2,guarantee", body]


def test_duplicates_inside_a_parcel_are_dropped_when_it_is_opened(
    start_router: Callable[..., Harness],
) -> None:
    h, client = spilled(start_router)
    batch = jobs(200, prefix="p")
    until_ack(client, send_batch(client, batch))
    # A REQUEST for one of its jobs, and a batch repeating a parcel's jobs
    # between fresh ones (neither is caught on arrival).
    again = client.send("REQUEST", "email", "guarantee", BODY.decode(), msgid="p:7")
    assert client.expect("ACK")[2] == again
    inside = [*jobs(1, prefix="fresh"), *batch[100:110], *jobs(3, prefix="fresh")[1:]]
    until_ack(client, send_batch(client, inside))
    info = monitor(h)
    # Duplicates in parcels are only found when their parcel is opened.
    assert info["parcels"] == 2
    assert info["queued"] == 20 + 200 + 1 + 13
    assert drain(h, 223) == [
        *names(jobs(20, prefix="first")),
        *names(batch[:7]),
        *names(batch[8:]),
        "p:7",  # the REQUEST was stored as a job of its own, before the parcels were opened
        *names(jobs(3, prefix="fresh")),
    ]
    info = monitor(h)
    assert (info["queued"], info["parcels"], info["duplicates"]) == (0, 0, 1 + 10)


def test_the_same_batch_sent_again_is_a_duplicate_at_once_not_queued_again(
    start_router: Callable[..., Harness],
) -> None:
    """A Spark task retried, an export sent again with the same run_id: the same
    BATCH as a parcel held is acknowledged, counted as duplicates, never as waiting."""
    h, client = spilled(start_router)
    batches = [jobs(200, prefix=f"p{i}") for i in range(2)]
    for batch in batches:
        until_ack(client, send_batch(client, batch))
    for batch in [*batches, batches[0]]:
        assert [f[2] for f in until_ack(client, send_batch(client, batch))] == [b"ACK"]
    info = monitor(h)
    assert (info["queued"], info["parcels"], info["duplicates"]) == (420, 2, 600)
    expected = names(jobs(20, prefix="first")) + [m for b in batches for m in names(b)]
    assert drain(h, 420) == expected
    assert (monitor(h)["queued"], monitor(h)["duplicates"]) == (0, 600)


def test_a_batch_that_starts_or_ends_with_a_held_job_is_checked_job_by_job(
    start_router: Callable[..., Harness],
) -> None:
    h, client = spilled(start_router)  # first:0-9 in memory, first:10-19 on disk
    first = jobs(20, prefix="first")
    in_memory = [*first[:5], *jobs(3, prefix="m")]
    on_disk = [*jobs(3, prefix="d"), *first[12:16]]
    for batch in (in_memory, on_disk):
        assert [f[2] for f in until_ack(client, send_batch(client, batch))] == [b"ACK"]
    info = monitor(h)
    assert (info["queued"], info["parcels"], info["duplicates"]) == (26, 0, 9)
    until_ack(client, send_batch(client, jobs(5, prefix="c")))  # nothing held: a parcel
    assert (monitor(h)["queued"], monitor(h)["parcels"]) == (31, 1)
    assert drain(h, 5) == names(first[:5])
    queued = monitor(h)["queued"]
    finished = [first[1], *jobs(1, prefix="f"), first[2]]
    until_ack(client, send_batch(client, finished))
    info = monitor(h)
    assert (info["queued"], info["parcels"], info["duplicates"]) == (queued + 1, 1, 11)


def test_a_batch_sent_again_does_not_push_the_router_over_its_high_water_mark(
    start_router: Callable[..., Harness],
) -> None:
    h, client = spilled(start_router, high_water_mark=300)
    batch = jobs(200, prefix="p")
    until_ack(client, send_batch(client, batch))
    until_ack(client, send_batch(client, batch))
    info = monitor(h)
    assert (info["queued"], info["blocked"]) == (220, False)
    until_ack(client, send_batch(client, jobs(100, prefix="over")))
    assert monitor(h)["blocked"] is True  # the mark still holds for new jobs


def test_a_job_finished_before_its_copy_in_a_parcel_is_opened_does_not_run_again(
    start_router: Callable[..., Harness],
) -> None:
    h, client = spilled(start_router)
    new = jobs(2, prefix="new")
    repeated = [new[0], *jobs(20, prefix="first")[:2], new[1]]
    until_ack(client, send_batch(client, repeated))
    assert monitor(h)["parcels"] == 1
    assert drain(h, 22) == [*names(jobs(20, prefix="first")), "new:0", "new:1"]
    assert monitor(h)["duplicates"] == 2


def test_batches_that_cannot_be_parcels_are_stored_job_by_job(
    start_router: Callable[..., Harness],
) -> None:
    h, client = spilled(start_router)
    mixed_queues = [*jobs(5, prefix="q"), (b"other-0", b"other", b"guarantee", BODY)]
    mixed_headers = [*jobs(5, prefix="h"), (b"h-x", b"email", b"", BODY)]
    spaced_body = [(b"s-0", b"email", b"guarantee", b' ["run", {}]')]
    urgent = jobs(5, prefix="urgent")
    urgent = [(m, q, b"priority:5", body) for m, q, _h, body in urgent]
    due = b"delay-until:%d" % (time.time() + 3600)
    later = [(b"later-%d" % i, b"email", due, BODY) for i in range(3)]
    bad = [*jobs(3, prefix="ok"), (b"bad-1", b"email", b"guarantee", b'{"run": 1}')]
    for batch in (mixed_queues, mixed_headers, spaced_body, urgent, later):
        assert [f[2] for f in until_ack(client, send_batch(client, batch))] == [b"ACK"]
    got = until_ack(client, send_batch(client, bad))
    assert list(rejects(got)) == [b"bad-1"]
    info = monitor(h)
    assert info["parcels"] == 0
    assert (info["queued"], info["delayed"]) == (20 + 6 + 6 + 1 + 5 + 3, 3)
    # priority:5 is ahead of everything waiting: those jobs were kept in memory.
    assert drain(h, 5) == names(urgent)


def test_a_cancelled_job_inside_a_parcel_never_runs(start_router: Callable[..., Harness]) -> None:
    h, client = spilled(start_router)
    batch = [(b"c-%d" % i, b"email", b"reply-requested", BODY) for i in range(50)]
    until_ack(client, send_batch(client, batch))
    assert monitor(h)["parcels"] == 1
    client.send("CANCEL", "c-17")
    assert client.expect("REPLY")[2:] == [CANCELLED_PAYLOAD, "c-17"]
    info = monitor(h)
    assert (info["parcels"], info["queued"]) == (0, 69)  # opened to find it
    # Sent again (a Spark task retried): the parcel's digest went when it was
    # opened, so each job is checked; the cancelled one is finished, not queued.
    assert [f[2] for f in until_ack(client, send_batch(client, batch))] == [b"ACK"]
    info = monitor(h)
    assert (info["parcels"], info["queued"], info["duplicates"]) == (0, 69, 50)
    got = drain(h, 69)
    assert "c-17" not in got and len(set(got)) == 69
    assert monitor(h)["queued"] == 0


def test_a_cancel_opens_only_the_parcels_whose_frame_holds_the_msgid(
    start_router: Callable[..., Harness],
) -> None:
    h, client = spilled(start_router)
    until_ack(client, send_batch(client, jobs(30, prefix="p")))
    client.send("CANCEL", "nobody")
    request_acked_next(h, client)  # the CANCEL was handled before it: no REPLY, nothing else
    assert monitor(h)["parcels"] == 1
    # "run" is in every body: the parcel is opened to look, and nothing is cancelled.
    client.send("CANCEL", "run")
    request_acked_next(h, client)
    info = monitor(h)
    assert (info["parcels"], info["queued"]) == (0, 52)
    assert drain(h, 50)[-30:] == names(jobs(30, prefix="p"))


def test_over_the_high_water_mark_a_batch_is_refused_job_by_job_not_parked(
    start_router: Callable[..., Harness],
) -> None:
    h, client = spilled(start_router, hwm_policy="reject", high_water_mark=100)
    until_ack(client, send_batch(client, jobs(70, prefix="fits")))
    assert monitor(h)["parcels"] == 1
    got = until_ack(client, send_batch(client, jobs(20, prefix="over")))
    assert sorted(rejects(got)) == sorted(m.encode() for m in names(jobs(20, prefix="over"))[10:])
    assert (monitor(h)["queued"], monitor(h)["parcels"]) == (100, 1)
    # Sent again at the mark: held already, so acknowledged, not refused.
    assert [f[2] for f in until_ack(client, send_batch(client, jobs(70, prefix="fits")))] == [
        b"ACK"
    ]
    assert (monitor(h)["queued"], monitor(h)["duplicates"]) == (100, 70)


def test_parcels_survive_a_restart(start_router: Callable[..., Harness], tmp_path: Path) -> None:
    path = str(tmp_path / "journal.sqlite3")
    h, client = spilled(start_router, journal=True, journal_path=path)
    batches = [jobs(100, prefix=f"b{i}") for i in range(2)]
    for batch in batches:
        until_ack(client, send_batch(client, batch))
    assert monitor(h)["parcels"] == 2
    h.close()
    h = start_router(queue_window=WINDOW, journal=True, journal_path=path)
    info = monitor(h)
    assert (info["queued"], info["parcels"]) == (220, 2)
    expected = names(jobs(20, prefix="first")) + [m for b in batches for m in names(b)]
    assert drain(h, 220) == expected


def test_acknowledged_parcels_survive_a_router_killed_with_sigkill(tmp_path: Path) -> None:
    ctx: zmq.Context[Any] = zmq.Context()
    addrs = tcp_addr(), tcp_addr(), tcp_addr()
    journal = tmp_path / "journal.sqlite3"
    env = {"EMQ_QUEUE_WINDOW": str(WINDOW)}
    procs = [start_router(*addrs, journal, **env)]
    try:
        client = Peer(ctx, addrs[0], b"spark-task")
        sent: list[str] = []
        for i in range(6):
            batch = jobs(250, prefix=f"k{i}")
            until_ack(client, send_batch(client, batch))
            sent += names(batch)
        info = admin_call(addrs[2], "MONITOR")
        assert (info["queued"], info["parcels"]) == (1500, 5)  # the first batch spilled
        os.kill(procs[0].pid, signal.SIGKILL)
        procs[0].popen.wait(10)
        procs.append(start_router(*addrs, journal, **env))
        info = admin_call(addrs[2], "MONITOR")
        assert (info["queued"], info["parcels"]) == (1500, 5)
        worker = Peer(ctx, addrs[1], b"jm")
        worker.send("INFORM", "email", "worker")
        worker.expect("ACK", timeout=20)
        worker.send("READY")
        got = []
        for _ in range(1500):
            got.append(worker.expect("REQUEST", timeout=20)[1])
            worker.send("READY")
        assert got == sent
    finally:
        for proc in procs:
            proc.stop()
        ctx.destroy(linger=0)


# -- a model: any mix of batches, REQUESTs, cancels and hand-outs ----------------------

Op = tuple[Any, ...]
_ids = st.integers(0, 40).map(lambda i: f"m{i}")
_batch = st.tuples(
    st.just("batch"),
    st.lists(_ids, min_size=1, max_size=12),
    st.sampled_from([0, 0, 3]),
    st.booleans(),  # uniform: one header frame for every job
)
_ops = st.lists(
    st.one_of(
        _batch,
        _batch,
        st.tuples(st.just("request"), _ids, st.sampled_from([0, 3])),
        st.tuples(st.just("cancel"), _ids),
        st.tuples(st.just("take"), st.integers(1, 15)),
    ),
    min_size=5,
    max_size=40,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_ops)
def test_every_job_runs_once_in_order_whether_parcelled_or_not(ops: list[Op]) -> None:
    """Drive the router's book directly, as its frontend would: a batch is tried as a
    parcel first, then job by job. Whatever comes, each msgid accepted runs exactly
    once unless cancelled before it ran, each hand-out run is in key order, and
    nothing is left counted once all ran."""
    sent: list[RoutedJob] = []
    book = Book(
        make_settings(queue_window=2),
        Journal(MEMORY),
        deliver=lambda worker, job: sent.append(job),
        to_client=lambda identity, message: None,
    )
    # One slot: it holds the job in ``sent``, or is free and takes the next arrival.
    book.routing.add_worker(b"jm", ((10, "q"),), 0.0)
    book.reports.ready(b"jm", 1.0)
    ran: list[str] = []
    cancelled: set[str] = set()
    accepted: set[str] = set()

    def take(n: int) -> None:
        keys = []
        while sent and n:
            job = sent.pop()
            assert not sent
            keys.append(job.key)
            ran.append(job.msgid)
            book.reports.done(b"jm", job.msgid, "ok", "{}", 1.0)  # hands out the next one, if any
            n -= 1
        assert keys[1:] == sorted(keys[1:])  # the first may be from before new arrivals

    for op in ops:
        if op[0] == "batch":
            _, msgids, priority, uniform = op
            headers = b"priority:%d" % priority
            batch = [
                (m.encode(), b"q", headers if uniform or i else b"guarantee," + headers, BODY)
                for i, m in enumerate(msgids)
            ]
            parsed = parse_headers(headers.decode())
            if not (uniform and book.accept_parcel(
                b"c", pack_jobs(batch), len(batch), "q", parsed, headers, 1.0
            )):  # fmt: skip
                book.accept_many(
                    b"c",
                    [
                        ([b"", b"eMQP/1.0", b"REQUEST", *job], job[0].decode(), "q",
                         parse_headers(job[2].decode()))
                        for job in batch
                    ],
                    1.0,
                )  # fmt: skip
            accepted.update(msgids)
        elif op[0] == "request":
            _, msgid, priority = op
            headers = b"priority:%d" % priority
            frames = [b"", b"eMQP/1.0", b"REQUEST", msgid.encode(), b"q", headers, BODY]
            book.accept(b"c", frames, msgid, "q", parse_headers(headers.decode()), 1.0)
            accepted.add(msgid)
        elif op[0] == "cancel":
            if op[1] in accepted and op[1] not in ran and book.outcomes.cancel(op[1]) is None:
                cancelled.add(op[1])
        else:
            take(op[1])
    take(10_000)
    assert len(ran) == len(set(ran))
    assert set(ran) | cancelled == accepted and not set(ran) & cancelled
    assert (book.routing.waiting.total(), book.journal.parcel_count()) == (0, 0)
    assert book.journal.counts()[WAITING] == Counter()


def test_a_batch_sent_again_into_a_queue_at_its_own_mark_is_known_not_held(
    start_router: Callable[..., Harness],
) -> None:
    """QUEUE_HIGH_WATER_MARK reached by the parcel itself: its copy (a Spark task
    retried) adds nothing, so it is acknowledged as duplicates, neither held
    (unanswered) nor refused past QUEUE_WINDOW, while new jobs are held."""
    h, client = spilled(start_router, queue_high_water_mark=200)
    batch = jobs(200, prefix="p")
    until_ack(client, send_batch(client, batch))
    info = monitor(h)
    assert (info["queued"], info["parcels"]) == (220, 1)
    assert [f[2] for f in until_ack(client, send_batch(client, batch))] == [b"ACK"]
    info = monitor(h)
    assert (info["queued"], info["duplicates"], info["parcels"]) == (220, 200, 1)
    assert not info["held"]
