"""BATCH (many REQUESTs in one message, one ACK) between our pipeline and our router.

The router in a thread with raw DEALER peers for what it does with a BATCH;
our pipeline against it, and against a scripted ROUTER for what a healthy
router of ours never does (lose an ACK, refuse a batch silently); our router
and job manager processes for "every job runs once".
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from django_eventmq.client.bulk import Pipeline
from django_eventmq.client.connection import Client
from django_eventmq.errors import BrokerUnavailable, RouterFull
from django_eventmq.protocol import new_msgid
from django_eventmq.protocol.batch import MAX_BATCH_JOBS, BatchJob, pack_jobs, unpack_jobs
from django_eventmq.protocol.headers import with_reply_requested
from django_eventmq.router.router import Router
from django_eventmq.runtime import transport
from tests.fake_router import ScriptedRouter
from tests.router.test_router import ROUTER_LOG, Harness, Peer, make_settings, warnings
from tests.support import Proc, tcp_addr
from tests.system.chaos.jobs import RECORD_ENV
from tests.system.chaos.support import admin_call, body, start_jobmanager, wait_recorded
from tests.system.chaos.support import start_router as start_router_process

V = b"eMQP/1.0"
BODY = '["run",{"callable":"noop","path":"benchmarks.noop_jobs","args":["é"],"kwargs":{}}]'.encode()


def jobs(n: int, prefix: str = "j", queue: bytes = b"email") -> list[BatchJob]:
    return [(f"{prefix}:{i}".encode(), queue, b"guarantee", BODY) for i in range(n)]


def send_batch(peer: Peer, batch: list[BatchJob], msgid: str | None = None) -> bytes:
    msgid = msgid or new_msgid()
    peer.send_raw([b"", V, b"BATCH", msgid.encode(), pack_jobs(batch)])
    return msgid.encode()


def until_ack(peer: Peer, msgid: bytes) -> list[list[bytes]]:
    """What the router sent ``peer`` up to the ACK of ``msgid`` (HEARTBEATs left out)."""
    got: list[list[bytes]] = []
    while True:
        frames = peer.recv_raw()
        if frames[2] == b"HEARTBEAT":
            continue
        got.append(frames)
        if frames[2] == b"ACK" and frames[4] == msgid:
            return got


def rejects(messages: list[list[bytes]]) -> dict[bytes, str]:
    return {f[4]: f[5].decode() for f in messages if f[2] == b"REJECT"}


def request_acked_next(h: Harness, client: Peer) -> None:
    """A REQUEST's ACK is the next thing the client gets: nothing else was pending."""
    msgid = client.send("REQUEST", "default", "", BODY.decode())
    frames = client.recv_raw()
    assert frames[2:3] == [b"ACK"] and frames[4] == msgid.encode(), frames


# -- the router ---------------------------------------------------------------------


def test_features_from_a_client_is_answered_with_batch_and_its_bounds(start_router) -> None:
    h = start_router()
    client = h.peer("frontend", "client")
    client.send("FEATURES", '{"batch":1}')
    answer = json.loads(client.expect("FEATURES")[2])
    assert answer == {
        "packed": 1,
        "batch": 1,
        "batch_jobs": MAX_BATCH_JOBS,
        "batch_bytes": h.router.settings.max_message_bytes,
        "high_water_mark": h.router.settings.high_water_mark,
    }


def test_a_batch_is_stored_acknowledged_once_and_handed_out_byte_for_byte(start_router) -> None:
    h = start_router()
    client = h.peer("frontend", "client")
    batch = [*jobs(299), (b"odd", b"other", b"retry-count:2,guarantee", '[\n "☃"]'.encode())]
    msgid = send_batch(client, batch)
    assert [f[2] for f in until_ack(client, msgid)] == [b"ACK"]
    info = h.ask("MONITOR")
    assert (info["queued"], info["rejected"], info["duplicates"]) == (300, 0, 0)
    assert (h.router.front.batches_received, h.router.front.batch_jobs_received) == (1, 300)
    request_acked_next(h, client)  # no second ACK, nothing else came
    # A job manager gets each job as the REQUEST it would have been; one that does
    # not speak DONE (this bare peer, as the reference's) is asked for a reply too.
    worker = h.peer("backend", "jm")
    worker.send("INFORM", '[[10, "other"]]', "worker")
    worker.expect("ACK")
    worker.send("READY")
    msgid_, queue, headers, body = batch[-1]
    expected = [msgid_, queue, with_reply_requested(headers), body]
    assert worker.expect("REQUEST")[1:] == [f.decode() for f in expected]


def test_jobs_failing_a_request_s_checks_get_their_reject_and_the_rest_is_stored(
    start_router, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger=ROUTER_LOG)
    h = start_router()
    client = h.peer("frontend", "client")
    batch = [
        (b"good-1", b"email", b"", BODY),
        (b"bad-body", b"email", b"", b'{"run": 1}'),
        (b"no-queue", b"", b"", BODY),
        (b"bad-header", b"email", b"retry-count:lots", BODY),
        (b"over-limit", b"email", b"retry-count:1000", BODY),
        (b"good-2", b"other", b"guarantee", BODY),
    ]
    msgid = send_batch(client, batch)
    got = until_ack(client, msgid)
    assert [f[2] for f in got] == [b"REJECT"] * 4 + [b"ACK"]  # REJECTs come first
    reasons = rejects(got)
    assert sorted(reasons) == [b"bad-body", b"bad-header", b"no-queue", b"over-limit"]
    assert "bad body" in reasons[b"bad-body"]
    assert "queue name is empty" in reasons[b"no-queue"]
    assert "retry-count" in reasons[b"bad-header"]
    assert "retry-count is above 100" in reasons[b"over-limit"]
    info = h.ask("MONITOR")
    assert (info["queued"], info["rejected"]) == (2, 4)
    assert info["per_queue"]["email"]["queued"] == 1
    assert any("retry-count is above 100" in w for w in warnings(caplog))


def test_over_the_high_water_mark_jobs_of_a_batch_are_refused_one_by_one(start_router) -> None:
    h = start_router(hwm_policy="reject", high_water_mark=5)
    client = h.peer("frontend", "client")
    msgid = send_batch(client, jobs(8))
    got = until_ack(client, msgid)
    assert sorted(rejects(got)) == [b"j:5", b"j:6", b"j:7"]
    assert all("high-water mark" in r for r in rejects(got).values())
    assert h.ask("MONITOR")["queued"] == 5


def test_a_batch_sent_again_is_acknowledged_again_and_adds_nothing(start_router) -> None:
    h = start_router()
    client = h.peer("frontend", "client")
    batch = jobs(200)
    msgid = send_batch(client, batch)
    assert [f[2] for f in until_ack(client, msgid)] == [b"ACK"]
    send_batch(client, batch, msgid.decode())
    assert [f[2] for f in until_ack(client, msgid)] == [b"ACK"]
    info = h.ask("MONITOR")
    assert (info["queued"], info["duplicates"]) == (200, 200)


def test_jobs_held_on_disk_only_are_found_by_the_batch_insert(start_router) -> None:
    # A window of 10: most held jobs are on disk only, where the grouped insert
    # of a batch finds them (memory cannot).
    h = start_router(queue_window=10)
    client = h.peer("frontend", "client")
    first = jobs(100)
    until_ack(client, send_batch(client, first))
    assert h.ask("MONITOR")["in_memory"] < 100
    later = jobs(50, prefix="new")
    # 40 held, 50 new, one twice in the batch; one header differs, so the batch
    # is not stored as a parcel (test_batch_parcels.py) but job by job.
    later[-1] = (*later[-1][:2], b"", later[-1][3])
    mixed = [*first[60:], *later, later[0]]
    until_ack(client, send_batch(client, mixed))
    info = h.ask("MONITOR")
    assert (info["queued"], info["duplicates"]) == (150, 41)
    worker = h.worker("w", "email", ready=0)
    worker.send("READY")
    got = []
    for _ in range(150):
        got.append(worker.expect("REQUEST")[1])
        worker.send("READY")
    assert got == [j[0].decode() for j in [*first, *later]]  # each once, in order


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (b"2,5,9,4\nj1emailguaranteeabc", "add up to"),
        (b"no head at all", "no head"),
        (b"2,1,0,1\nj1q\xff", "not UTF-8 text"),
        (pack_jobs([(b"%d" % i, b"q", b"", b"[]") for i in range(MAX_BATCH_JOBS + 1)]),
         "more than"),
    ],
)  # fmt: skip
def test_a_malformed_batch_is_logged_once_and_dropped_and_the_router_serves_on(
    start_router, caplog, frame: bytes, reason: str
) -> None:
    caplog.set_level(logging.WARNING, logger=ROUTER_LOG)
    h = start_router()
    client = h.peer("frontend", "client")
    for _ in range(2):
        client.send_raw([b"", V, b"BATCH", new_msgid().encode(), frame])
    request_acked_next(h, client)  # no ACK (nor anything) for the malformed ones
    assert [w for w in warnings(caplog) if reason in w and "dropped BATCH" in w] != []
    assert len([w for w in warnings(caplog) if "BATCH" in w]) == 1
    msgid = send_batch(client, jobs(3))
    assert [f[2] for f in until_ack(client, msgid)] == [b"ACK"]
    assert h.ask("MONITOR")["queued"] == 4


def test_a_batch_decoded_as_a_message_is_handled_the_same() -> None:
    """The frontend's handler table has BATCH too (the drain loop takes its frames)."""
    router = Router(make_settings())
    router.start()
    try:
        handle = router._handle
        handle(router.frontend, [b"client", b"", V, b"BATCH", b"b1", pack_jobs(jobs(2))], 0.0)
        assert router.commits.acks == [(b"client", b"b1", False)]
        # A REJECT that cannot go out (no such peer here) means no ACK: the
        # client must not count the refused job as stored.
        bad = [(b"bad", b"email", b"", b"{}"), *jobs(3, prefix="k")]
        handle(router.frontend, [b"client", b"", V, b"BATCH", b"b2", pack_jobs(bad)], 0.0)
        assert router.commits.acks == [(b"client", b"b1", False)]
        assert (router.book.backlog(), router.book.rejected, router.front.batches_received) == (
            5,
            1,
            2,
        )
    finally:
        router.close()


# -- the pipeline against our router -----------------------------------------------


def test_send_many_switches_to_batch_once_the_router_answers_features(start_router) -> None:
    h = start_router()
    client = Client(h.router.frontend_address)
    try:
        first = client.send_many(jobs(3_000), window=1_000, ack_timeout=30)
        assert (first.sent, first.acked, first.rejected) == (3_000, 3_000, {})
        assert h.router.front.batches_received >= first.batches >= 1
        assert client.router_features is not None and client.router_features["batch"] == 1
        # Known now: the next send_many batches from its first job.
        before = h.router.front.batch_jobs_received
        second = client.send_many(jobs(1_200, prefix="k"), window=1_000, ack_timeout=30)
        assert (second.acked, second.batches) == (1_200, 3)  # batches of window // 2 = 500
        assert h.router.front.batch_jobs_received - before == 1_200
    finally:
        client.close()
    assert h.ask("MONITOR")["queued"] == 4_200


def test_refusals_inside_batches_are_counted_exactly(start_router) -> None:
    # No job manager: jobs wait in the router, and past 20 it refuses them.
    h = start_router(hwm_policy="reject", high_water_mark=20)
    channel = transport.Channel(transport.DEALER, connect=h.router.frontend_address, hwm=1000)
    refused: dict[bytes, str] = {}
    try:
        sender = Pipeline(
            channel,
            addr=h.router.frontend_address,
            window=50,
            batch=10,
            router_features={"batch": 1},
            on_reject=lambda msgid, reason: refused.setdefault(msgid, reason),
        )
        sender.send_requests([*jobs(40), *jobs(10, prefix="o", queue=b"other")])
        sender.flush()
    finally:
        channel.close()
    email, other = sender.counts["email"], sender.counts["other"]
    assert (email.sent, other.sent) == (40, 10)
    assert (email.acked, email.rejected, other.acked, other.rejected) == (20, 20, 0, 10)
    assert len(refused) == 30 and sender.batches_sent == 5
    assert email.reasons and "high-water mark" in email.reasons[0]
    assert sender.in_flight == 0


# -- the pipeline against a scripted router --------------------------------------------


def features_batch(frames: list[bytes]) -> list[list[bytes]]:
    return [[b"", V, b"FEATURES", b"f", b'{"batch":1,"batch_jobs":1000,"batch_bytes":65536}']]


def ack(msgid: bytes) -> list[bytes]:
    return [b"", V, b"ACK", new_msgid().encode(), msgid]


def reject(job_msgid: bytes, reason: str = "no") -> list[bytes]:
    return [b"", V, b"REJECT", new_msgid().encode(), job_msgid, reason.encode()]


def pipeline_to(
    addr: str, *, watch_peer: bool = False, **kw: Any
) -> tuple[Pipeline, transport.Channel]:
    channel = transport.Channel(transport.DEALER, connect=addr, hwm=10_000, watch_peer=watch_peer)
    return Pipeline(channel, addr=addr, **kw), channel


def test_the_pipeline_asks_then_batches_and_a_lost_ack_means_the_same_batch_again() -> None:
    copies: Counter[bytes] = Counter()

    def answer(frames: list[bytes], _n: int) -> list[list[bytes]]:
        if frames[2] == b"FEATURES":
            return features_batch(frames)
        if frames[2] == b"REQUEST":
            return [ack(frames[3])]
        copies[frames[3]] += 1
        return [ack(frames[3])] if copies[frames[3]] == 2 else []  # the first ACK is "lost"

    with ScriptedRouter(answer, features_aside=False) as peer:
        sender, channel = pipeline_to(peer.addr, window=200, batch=50, ack_timeout=0.3)
        try:
            sender.send_requests(jobs(1))  # FEATURES, then this one as a REQUEST
            sender.flush()  # the answer to FEATURES came before this one's ACK
            assert sender.batching
            sender.send_requests(jobs(400)[1:])
            sender.flush()
        finally:
            channel.close()
    assert [f[2] for f in peer.received[:2]] == [b"FEATURES", b"REQUEST"]
    counts = sender.counts["email"]
    assert (counts.sent, counts.acked, counts.rejected, counts.duplicates) == (400, 400, 0, 0)
    assert counts.resent == 399 and sender.batches_sent == 8
    sent = peer.batches()
    assert len(sent) == 16 and set(copies.values()) == {2}
    by_msgid: dict[bytes, list[list[bytes]]] = {}
    for batch_msgid, job_msgids in sent:
        by_msgid.setdefault(batch_msgid, []).append(job_msgids)
    assert all(first == again for first, again in by_msgid.values())  # same jobs again
    assert sorted(m for first, _ in by_msgid.values() for m in first) == sorted(
        j[0] for j in jobs(400)[1:]
    )


def test_batches_are_cut_at_the_same_places_whatever_went_as_requests_first() -> None:
    """So a Spark task sent again makes the BATCH messages it made before, which
    the router recognises whole (parcels) instead of counting their jobs again."""

    def answer(frames: list[bytes], _n: int) -> list[list[bytes]]:
        return features_batch(frames) if frames[2] == b"FEATURES" else [ack(frames[3])]

    def cuts(requests_first: int, **kw: Any) -> tuple[list[list[bytes]], list[bytes]]:
        with ScriptedRouter(answer, features_aside=False) as peer:
            sender, channel = pipeline_to(peer.addr, window=200, batch=50, **kw)
            try:
                if requests_first:
                    sender.send_requests(jobs(requests_first))  # FEATURES, then REQUESTs
                    sender.flush()
                    assert sender.batching
                sender.send_requests(jobs(230)[requests_first:])
                sender.flush()
            finally:
                channel.close()
        return [msgids for _, msgids in peer.batches()], [f[2] for f in peer.received]

    known, _ = cuts(0, router_features={"batch": 1})
    assert [len(b) for b in known] == [50, 50, 50, 50, 30]
    # Asked, with the first jobs held for the answer (Spark): the same BATCHes.
    asked, kinds = cuts(0, features_wait=5.0)
    assert asked == known and b"REQUEST" not in kinds
    # Asked without waiting (a client): REQUESTs first, then cut where the others cut.
    after_requests, _ = cuts(7)
    assert [len(b) for b in after_requests] == [43, 50, 50, 50, 30]
    assert after_requests[1:] == known[1:]


def test_a_router_that_never_answers_features_gets_the_held_jobs_as_requests() -> None:
    with ScriptedRouter(lambda frames, n: [ack(frames[3])]) as peer:  # the reference's way
        sender, channel = pipeline_to(peer.addr, window=200, batch=50, features_wait=0.2)
        try:
            sender.send_requests(jobs(120))
            sender.flush()
        finally:
            channel.close()
    assert [f[2] for f in peer.received] == [b"REQUEST"] * 120 and len(peer.features) == 1
    assert sender.counts["email"].acked == 120 and not sender.batching


def test_a_router_that_answers_nothing_gets_one_request_not_a_window_of_them() -> None:
    """A router of ours that reads nothing (full) would store those REQUESTs later,
    beside the BATCHes of an earlier attempt that it recognises (REQUESTs not)."""
    with ScriptedRouter(lambda frames, n: []) as peer:
        sender, channel = pipeline_to(
            peer.addr, window=200, batch=50, features_wait=0.2, ack_timeout=0.2, give_up=1.0
        )
        try:
            with pytest.raises(BrokerUnavailable, match="answered nothing"):
                sender.send_requests(jobs(120))
                sender.flush()
        finally:
            channel.close()
    assert {f[3] for f in peer.received} == {b"j:0"}  # sent again, never another


def test_jobs_refused_before_a_resend_are_left_out_of_it() -> None:
    seen: Counter[bytes] = Counter()

    def answer(frames: list[bytes], _n: int) -> list[list[bytes]]:
        seen[frames[3]] += 1
        if frames[2] != b"BATCH":
            return []
        job_msgids = [job[0] for job in unpack_jobs(frames[4])]
        if seen[frames[3]] == 1:
            return [reject(job_msgids[0], "refused")]  # and the ACK is lost
        return [ack(frames[3])]

    with ScriptedRouter(answer, features_aside=False) as peer:
        sender, channel = pipeline_to(
            peer.addr, batch=10, ack_timeout=0.3, router_features={"batch": 1}
        )
        try:
            sender.send_requests(jobs(10))
            sender.flush()
        finally:
            channel.close()
    first, again = peer.batches()
    assert first[0] == again[0] and again[1] == first[1][1:]
    counts = sender.counts["email"]
    assert (counts.sent, counts.acked, counts.rejected, counts.resent) == (10, 9, 1, 9)
    assert counts.reasons == ["refused"]
    assert peer.received[0][2] == b"BATCH"  # features known: nothing asked


def test_a_batch_whose_every_job_was_refused_needs_no_ack() -> None:
    def answer(frames: list[bytes], _n: int) -> list[list[bytes]]:
        if frames[2] != b"BATCH":
            return []
        return [reject(job[0]) for job in unpack_jobs(frames[4])]

    with ScriptedRouter(answer, features_aside=False) as peer:
        sender, channel = pipeline_to(peer.addr, batch=5, router_features={"batch": 1})
        try:
            sender.send_requests(jobs(5))
            sender.flush()  # returns: nothing is left to acknowledge
        finally:
            channel.close()
    assert (sender.counts["email"].rejected, sender.counts["email"].acked) == (5, 0)
    assert len(peer.batches()) == 1


def test_a_batch_the_router_never_acknowledges_gives_a_clear_error() -> None:
    poisoned = b"j:3"

    def answer(frames: list[bytes], _n: int) -> list[list[bytes]]:
        if frames[2] == b"BATCH" and poisoned in [job[0] for job in unpack_jobs(frames[4])]:
            return []  # as our router does with a BATCH it cannot unpack
        return [ack(frames[3])]

    with ScriptedRouter(answer, features_aside=False) as peer:
        sender, channel = pipeline_to(
            peer.addr, batch=2, ack_timeout=0.1, give_up=1.0, router_features={"batch": 1}
        )
        try:
            with pytest.raises(BrokerUnavailable, match=r"did not acknowledge BATCH \S+ \(2 job"):
                sender.send_requests(jobs(40))
                sender.flush()
        finally:
            channel.close()
    assert sender.counts["email"].acked == 38


@pytest.mark.parametrize("batch", [0, 5], ids=["requests", "a batch"])
def test_jobs_held_while_the_router_answers_its_features_give_a_clear_error(batch: int) -> None:
    """A router of ours that reads (it answers the FEATURES asked when it is
    silent) but holds our jobs (their queue at QUEUE_HIGH_WATER_MARK, or its
    journal failing): the sender gives up after ``give_up`` naming the queue,
    neither waiting for ever (those answers are not answers to jobs) nor
    calling the connected router full (it reads)."""
    started = time.monotonic()

    def bounded() -> None:  # a bound on a hang (10 x give_up), not a timing
        assert time.monotonic() - started < 10, "flush did not give up"

    with ScriptedRouter(
        lambda frames, n: features_batch(frames) if frames[2] == b"FEATURES" else [],
        features_aside=False,
    ) as peer:
        sender, channel = pipeline_to(
            peer.addr,
            watch_peer=True,
            batch=batch,
            router_features={"batch": 1},
            ack_timeout=0.1,
            give_up=1.0,
            on_wait=bounded,
        )
        try:
            with pytest.raises(BrokerUnavailable, match="QUEUE_HIGH_WATER_MARK") as info:
                sender.send_requests(jobs(3))
                sender.flush()
        finally:
            channel.close()
    assert "email" in str(info.value) and not isinstance(info.value, RouterFull)
    assert sum(f[2] == b"FEATURES" for f in peer.received) >= 2  # it was asked, and answered
    assert {f[2] for f in peer.received} == {b"FEATURES", b"BATCH" if batch else b"REQUEST"}


def test_a_job_too_big_for_a_batch_goes_as_a_request() -> None:
    def answer(frames: list[bytes], _n: int) -> list[list[bytes]]:
        return [ack(frames[3])]

    with ScriptedRouter(answer, features_aside=False) as peer:
        sender, channel = pipeline_to(peer.addr, router_features={"batch": 1, "batch_bytes": 2_000})
        try:
            big = (b"big", b"email", b"", b"[" + b" " * 3_000 + b"]")
            sender.send_requests([*jobs(3), big])
            sender.flush()
        finally:
            channel.close()
    assert [f[2] for f in peer.received] == [b"REQUEST", b"BATCH"]
    assert peer.received[0][3] == b"big"
    assert sender.counts["email"].acked == 4


def test_a_bad_batch_size_is_refused() -> None:
    channel = transport.Channel(transport.DEALER, connect=tcp_addr())
    try:
        with pytest.raises(ValueError, match="batch must be 0"):
            Pipeline(channel, addr="x", batch=MAX_BATCH_JOBS + 1)
    finally:
        channel.close()


# -- processes: every job runs once ----------------------------------------------------


def test_batched_jobs_run_exactly_once_even_when_sent_again(tmp_path: Path) -> None:
    ran = tmp_path / "ran.txt"
    frontend, backend, admin = tcp_addr(), tcp_addr(), tcp_addr()
    procs: list[Proc] = [start_router_process(frontend, backend, admin, tmp_path / "journal.db")]
    client = Client(frontend)
    try:
        procs.append(start_jobmanager(backend, concurrency=2, **{RECORD_ENV: str(ran)}))
        tokens = [f"t:{i}" for i in range(600)]
        batch = [(t.encode(), b"default", b"guarantee", body(t)) for t in tokens]
        client.send_many(batch[:1], ack_timeout=30)  # learns the router's FEATURES
        first = client.send_many(batch[1:], ack_timeout=30)
        assert (first.acked, first.batches) == (599, 2)
        wait_recorded(ran, set(tokens), timeout=60)
        again = client.send_many(batch, ack_timeout=30)  # all finished: recognised, not run again
        assert (again.acked, again.batches) == (600, 2)
        assert admin_call(admin, "MONITOR")["duplicates"] == 600
        client.send_many([(b"last", b"default", b"guarantee", body("last"))], ack_timeout=30)
        lines = wait_recorded(ran, {"last"}, timeout=30)
    finally:
        client.close()
        for proc in reversed(procs):
            proc.stop()
    assert Counter(lines) == Counter([*tokens, "last"])
