"""The router's durable side on real sockets: ACK after store, restarts, DONE/NACK/CANCEL,
leases, poisoned jobs, retries, delays, priorities, back-pressure and MONITOR."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from django_eventmq.router import scheduler_relay
from django_eventmq.router.outcomes import CANCELLED_PAYLOAD
from tests.router.test_router import JOB, Harness, Peer, make_settings
from tests.support import wait_for


@pytest.fixture
def journal_path(tmp_path: Path) -> str:
    return str(tmp_path / "journal.sqlite3")


@pytest.fixture
def start(zctx: zmq.Context[Any], journal_path: str) -> Iterator[Callable[..., Harness]]:
    """Start a router on the test's journal file (again after a restart)."""
    made: list[Harness] = []

    def start(**overrides: Any) -> Harness:
        values: dict[str, Any] = {"journal": True, "journal_path": journal_path}
        values.update(overrides)
        harness = Harness(zctx, make_settings(**values))
        made.append(harness)
        return harness

    yield start
    for harness in made:
        if harness.thread.is_alive():
            harness.close()


def stop(h: Harness) -> None:
    h.close()
    h.peers.clear()


def modern_worker(
    h: Harness, name: str, queues: str = "", ready: int = 1, said: str = '{"done":1,"cancel":1}'
) -> Peer:
    """A job manager that answers FEATURES (``said``: reports jobs with DONE)."""
    peer = h.peer("backend", name)
    inform = peer.send("INFORM", queues, "worker")
    assert peer.expect("ACK")[2] == inform
    features = json.loads(peer.expect("FEATURES")[2])
    assert features["done"] == 1 and features["cancel"] == 1
    peer.send("FEATURES", said)
    for _ in range(ready):
        peer.send("READY")

    def taken() -> bool:
        shown = h.ask("ROUTER_SHOW_WORKERS")["connected_workers"].get(peer.identity.decode())
        return shown is not None and shown["available_slots"] + shown["inflight"] == ready

    wait_for(taken, what=f"{name}'s {ready} READY(s) to be taken")
    return peer


def monitor(h: Harness) -> dict[str, Any]:
    return h.ask("MONITOR")


def run_one_at_a_time(worker: Peer, n: int) -> list[str]:
    """READY once, then DONE for each of ``n`` jobs as it comes; their msgids in order."""
    got: list[str] = []
    worker.send("READY")
    for _ in range(n):
        got.append(worker.expect("REQUEST")[1])
        worker.send("DONE", got[-1], "ok", "{}")
    return got


def send_request(client: Peer, headers: str = "", queue: str = "default", **kw: Any) -> str:
    return client.send("REQUEST", queue, headers, JOB, **kw)


# -- stored before acknowledged; kept across restarts ----------------------------------


def test_acked_jobs_survive_a_restart_in_order(start: Callable[..., Harness]) -> None:
    h = start()
    client = h.peer("frontend", "client")
    sent = [h.request(client, headers="guarantee") for _ in range(3)]
    info = monitor(h)
    assert info["queued"] == 3 and info["syncs"] >= 1 and info["store_bytes"] > 0
    assert info["per_queue"] == {
        "default": {"queued": 3, "in_flight": 0, "delayed": 0, "poisoned": 0, "expired": 0}
    }
    stop(h)

    h = start()
    assert monitor(h)["queued"] == 3
    worker = h.worker("w", ready=0)
    for _ in range(3):
        worker.send("READY")
    assert [worker.expect("REQUEST")[1] for _ in range(3)] == sent


def test_jobs_handed_out_but_not_finished_are_handed_out_again_after_a_restart(
    start: Callable[..., Harness],
) -> None:
    h = start()
    worker = modern_worker(h, "w", ready=2)
    client = h.peer("frontend", "client")
    first = h.request(client)
    second = h.request(client)
    assert {worker.expect("REQUEST")[1], worker.expect("REQUEST")[1]} == {first, second}
    worker.send("DONE", first, "ok", '{"value": 1}')
    wait_for(lambda: monitor(h)["in_flight"] == 1, what="the DONE")
    stop(h)

    h = start()
    info = monitor(h)
    assert (info["queued"], info["recovered"]) == (1, 1)
    again = h.worker("again", ready=0)
    again.send("READY")
    assert again.expect("REQUEST")[1] == second


def test_a_resent_request_is_acked_again_and_runs_once(start: Callable[..., Harness]) -> None:
    h = start()
    client = h.peer("frontend", "client")
    msgid = h.request(client, headers="guarantee")
    # Waiting: the same msgid again is the same job.
    send_request(client, "guarantee", msgid=msgid)
    assert client.expect("ACK")[2] == msgid
    worker = modern_worker(h, "w")
    assert worker.expect("REQUEST")[1] == msgid
    # Running: still the same job.
    send_request(client, "guarantee", msgid=msgid)
    assert client.expect("ACK")[2] == msgid
    worker.send("DONE", msgid, "ok", '{"value": 1}')
    wait_for(lambda: monitor(h)["in_flight"] == 0, what="the DONE")
    # Finished recently: acknowledged, not run again.
    send_request(client, "guarantee", msgid=msgid)
    assert client.expect("ACK")[2] == msgid
    other = h.request(client)
    assert worker.expect("REQUEST")[1] == other  # the next one, not the duplicate
    assert monitor(h)["duplicates"] == 3


def test_a_resent_request_whose_job_is_only_on_disk_is_not_stored_twice(
    start: Callable[..., Harness],
) -> None:
    # Past the in-memory window, and delayed: the router holds these jobs on disk only.
    h = start(queue_window=5)
    client = h.peer("frontend", "client")
    sent = [h.request(client) for _ in range(20)]
    later = h.request(client, headers=f"delay-until:{time.time() + 3600}")
    assert monitor(h)["in_memory"] < 20
    for msgid in (sent[-1], later):
        send_request(client, msgid=msgid)
        assert client.expect("ACK")[2] == msgid
    info = monitor(h)
    assert (info["queued"], info["delayed"], info["duplicates"]) == (20, 1, 2)
    assert run_one_at_a_time(modern_worker(h, "w", ready=0), 20) == sent  # each once, in order
    wait_for(lambda: monitor(h)["queued"] == 0, what="the DONEs")


# -- DONE, NACK, CANCEL ------------------------------------------------------------------


def test_done_frees_the_slot_and_sends_the_reply_to_the_client(h: Harness) -> None:
    worker = modern_worker(h, "w")
    client = h.peer("frontend", "client")
    one = h.request(client, headers="reply-requested")
    two = h.request(client)
    assert worker.expect("REQUEST")[1] == one
    worker.send("DONE", one, "failed", '{"value": null, "error": {"type": "ValueError"}}')
    reply = client.expect("REPLY")
    assert reply[2:] == ['{"value": null, "error": {"type": "ValueError"}}', one]
    assert worker.expect("REQUEST")[1] == two  # no READY needed: DONE freed the slot
    worker.send("DONE", two, "ok", '{"value": 2}')
    wait_for(lambda: h.ask("STATUS")["processed_messages_by_queue"] == {"default": 2})
    assert not client.pending()  # no reply was asked for the second one


def test_nack_hands_the_job_to_another_worker_at_once(h: Harness) -> None:
    leaving = modern_worker(h, "leaving")
    client = h.peer("frontend", "client")
    msgid = h.request(client)
    assert leaving.expect("REQUEST")[1] == msgid
    staying = modern_worker(h, "staying")
    leaving.send("NACK", msgid, "stopping")
    assert staying.expect("REQUEST")[1] == msgid
    info = monitor(h)
    assert (info["requeued"], info["in_flight"], info["poisoned"]) == (1, 1, 0)


def test_nack_stopping_ends_dispatch_to_that_worker_but_keeps_its_running_jobs(
    h: Harness,
) -> None:
    leaving = modern_worker(h, "leaving", ready=3)
    client = h.peer("frontend", "client")
    running = h.request(client, headers="reply-requested")
    prefetched = h.request(client)
    assert leaving.expect("REQUEST")[1] == running
    assert leaving.expect("REQUEST")[1] == prefetched
    leaving.send("NACK", prefetched, "stopping")  # handed back unrun: it is shutting down

    def shown() -> dict[str, Any]:
        workers = h.ask("ROUTER_SHOW_WORKERS")["connected_workers"]
        return workers[leaving.identity.decode()]  # type: ignore[no-any-return]

    wait_for(lambda: shown()["stopping"], what="the worker to be seen stopping")
    assert (shown()["available_slots"], shown()["inflight"]) == (0, 1)  # its 3rd slot is gone
    later = h.request(client)
    leaving.send("DONE", running, "ok", '{"value": 1}')
    assert client.expect("REPLY")[2:] == ['{"value": 1}', running]  # its running job finished
    info = monitor(h)
    assert (info["queued"], info["in_flight"]) == (2, 0)  # nothing went to it meanwhile
    received = []
    while leaving.pending():
        received.append(leaving.recv_raw()[2])
    assert b"REQUEST" not in received, received
    staying = modern_worker(h, "staying", ready=2)
    assert {staying.expect("REQUEST")[1], staying.expect("REQUEST")[1]} == {prefetched, later}


def test_cancel_a_waiting_job_drops_it_and_tells_the_client(h: Harness) -> None:
    client = h.peer("frontend", "client")
    doomed = h.request(client, headers="reply-requested")
    kept = h.request(client)
    client.send("CANCEL", doomed)
    assert client.expect("REPLY")[2:] == [CANCELLED_PAYLOAD, doomed]
    assert json.loads(CANCELLED_PAYLOAD)["error"]["type"] == "Cancelled"
    worker = modern_worker(h, "w")
    assert worker.expect("REQUEST")[1] == kept
    assert monitor(h)["queued"] == 0


def test_cancel_a_running_job_is_forwarded_to_a_worker_that_can_cancel(h: Harness) -> None:
    worker = modern_worker(h, "w")
    client = h.peer("frontend", "client")
    msgid = h.request(client, headers="reply-requested")
    assert worker.expect("REQUEST")[1] == msgid
    client.send("CANCEL", msgid)
    assert worker.expect("CANCEL")[2] == msgid
    worker.send("DONE", msgid, "cancelled", '{"value": null, "error": {"type": "Cancelled"}}')
    assert client.expect("REPLY")[3] == msgid


def test_cancel_of_a_job_on_a_reference_worker_is_not_forwarded(h: Harness) -> None:
    worker = h.worker("reference")  # never sent FEATURES, DONE or NACK
    client = h.peer("frontend", "client")
    msgid = h.request(client)
    assert worker.expect("REQUEST")[1] == msgid
    client.send("CANCEL", msgid)
    h.request(client)  # the CANCEL has been handled when this is ACKed
    assert not worker.pending()


# -- deaths, poisoned jobs, retries ---------------------------------------------------------


def test_a_job_that_kills_its_worker_n_times_is_set_aside(
    start: Callable[..., Harness],
) -> None:
    h = start(poison_after=2)
    worker = modern_worker(h, "w")
    client = h.peer("frontend", "client")
    msgid = h.request(client, headers="guarantee")
    assert worker.expect("REQUEST")[1] == msgid
    worker.send("DONE", msgid, "died", "worker process exited with signal 9")
    assert worker.expect("REQUEST")[1] == msgid  # handed out again
    worker.send("DONE", msgid, "died", "worker process exited with signal 9")
    reject = client.expect("REJECT")
    assert reject[2] == msgid and "2 time(s)" in reject[3]
    (poisoned,) = h.ask("STATUS")["poisoned_messages"]
    assert (poisoned["msgid"], poisoned["queue"], poisoned["job"]) == (msgid, "default", JOB)
    assert monitor(h)["per_queue"]["default"]["poisoned"] == 1
    stop(h)
    h = start(poison_after=2)  # still set aside after a restart, not handed out
    assert monitor(h)["poisoned"] == 1 and monitor(h)["queued"] == 0
    client = h.peer("frontend", "client")
    client.send("CANCEL", msgid)  # a cancel clears it
    wait_for(lambda: monitor(h)["poisoned"] == 0, what="the poisoned job to be cleared")


def test_the_job_manager_that_reported_the_last_death_is_told_the_job_is_set_aside(
    start: Callable[..., Harness],
) -> None:
    """It records the job's end (the router has no database); the reason names the death."""
    h = start(poison_after=2)
    worker = modern_worker(h, "w", said='{"done":1,"cancel":1,"poisoned":1}')
    client = h.peer("frontend", "client")
    msgid = h.request(client)
    died = json.dumps({"error": {"type": "WorkerDied", "message": "pid=7 exited with code 1"}})
    for _ in range(2):
        assert worker.expect("REQUEST")[1] == msgid
        worker.send("DONE", msgid, "died", died)
    reject = worker.expect("REJECT")
    assert reject[2] == msgid
    assert reject[3] == "poisoned: its worker process died (pid=7 exited with code 1), 2 time(s)"


def test_retry_status_runs_the_job_again_until_its_retry_count_is_used(
    start: Callable[..., Harness],
) -> None:
    h = start(retry_backoff_base=0.01, retry_backoff_cap=0.05)
    worker = modern_worker(h, "w")
    client = h.peer("frontend", "client")
    # A client's own attempt:N is replaced on a retry, other headers are kept as they were.
    msgid = h.request(client, headers="reply-requested,retry-count:2,attempt:7,x-tag")
    handed_out = []
    for _ in range(2):
        request = worker.expect("REQUEST")
        assert request[1] == msgid
        handed_out.append(request[3])
        worker.send("DONE", msgid, "retry", '{"value": null, "error": {"type": "Flaky"}}')
    request = worker.expect("REQUEST")
    assert request[1] == msgid
    handed_out.append(request[3])
    assert handed_out == [
        "reply-requested,retry-count:2,attempt:7,x-tag",  # first run: forwarded unchanged
        "reply-requested,retry-count:2,x-tag,attempt:2",
        "reply-requested,retry-count:2,x-tag,attempt:3",
    ]
    worker.send("DONE", msgid, "retry", '{"value": null, "error": {"type": "Flaky"}}')
    assert client.expect("REPLY")[2:] == ['{"value": null, "error": {"type": "Flaky"}}', msgid]
    assert monitor(h)["delayed"] == 0


def test_a_retry_handed_out_again_after_a_loss_keeps_its_attempt(
    start: Callable[..., Harness],
) -> None:
    h = start(retry_backoff_base=0.01, retry_backoff_cap=0.05)
    first = modern_worker(h, "first")
    client = h.peer("frontend", "client")
    msgid = h.request(client, headers="retry-count:3")
    assert first.expect("REQUEST")[1] == msgid
    first.send("DONE", msgid, "retry", '{"value": null, "error": {"type": "Flaky"}}')
    assert first.expect("REQUEST")[3] == "retry-count:3,attempt:2"
    first.send("DONE", msgid, "died", "worker process exited with signal 9")
    assert first.expect("REQUEST")[3] == "retry-count:3,attempt:2"  # a loss is no new attempt
    stop(h)
    h = start()
    second = modern_worker(h, "second")
    assert second.expect("REQUEST")[3] == "retry-count:3,attempt:2"  # nor is a restart


def test_a_job_whose_lease_runs_out_is_handed_out_again(start: Callable[..., Harness]) -> None:
    h = start(lease_grace=0.0, heartbeat_interval=0.2, heartbeat_timeout=60.0)
    slow = modern_worker(h, "slow")
    client = h.peer("frontend", "client")
    msgid = h.request(client, headers="timeout:1")
    assert slow.expect("REQUEST")[1] == msgid
    other = modern_worker(h, "other")
    assert other.expect("REQUEST", timeout=10)[1] == msgid
    assert monitor(h)["expired"] == 1
    # The first run's late report still finishes the job for good.
    slow.send("DONE", msgid, "ok", "{}")
    other.send("DONE", msgid, "ok", "{}")
    wait_for(lambda: monitor(h)["in_flight"] == 0)


def test_a_departed_workers_jobs_wait_for_its_late_report_then_are_handed_out_again(
    start: Callable[..., Harness],
) -> None:
    h = start(shutdown_grace=0.3, lease_grace=0.0, heartbeat_interval=0.2)
    leaving = modern_worker(h, "leaving", ready=2)
    client = h.peer("frontend", "client")
    reported = h.request(client)
    orphan = h.request(client)
    assert {leaving.expect("REQUEST")[1], leaving.expect("REQUEST")[1]} == {reported, orphan}
    leaving.send("KBYE")
    leaving.send("DONE", reported, "ok", "{}")  # finished while leaving: done for good
    wait_for(lambda: monitor(h)["in_flight"] == 1)
    newcomer = modern_worker(h, "newcomer")
    assert newcomer.expect("REQUEST", timeout=10)[1] == orphan
    assert monitor(h)["expired"] == 1


# -- delays, priorities, windows ----------------------------------------------------------


def test_delay_until_holds_a_job_back_until_its_time(h: Harness) -> None:
    worker = modern_worker(h, "w")
    client = h.peer("frontend", "client")
    later = h.request(client, headers=f"delay-until:{time.time() + 0.5}")
    assert monitor(h)["delayed"] == 1
    now = h.request(client)
    assert worker.expect("REQUEST")[1] == now  # the delayed one was not handed out first
    worker.send("DONE", now, "ok", "{}")
    assert worker.expect("REQUEST", timeout=10)[1] == later
    assert monitor(h)["delayed"] == 0


def test_higher_priority_is_handed_out_first(h: Harness) -> None:
    client = h.peer("frontend", "client")
    low = h.request(client)
    high = h.request(client, headers="priority:9")
    worker = modern_worker(h, "w", ready=0)
    worker.send("READY")
    assert worker.expect("REQUEST")[1] == high
    worker.send("DONE", high, "ok", "{}")
    assert worker.expect("REQUEST")[1] == low


def test_only_a_window_of_each_queue_is_in_memory(start: Callable[..., Harness]) -> None:
    h = start(queue_window=10)
    client = h.peer("frontend", "client")
    sent = [h.request(client, headers=f"priority:{i % 3}") for i in range(100)]
    info = monitor(h)
    assert info["queued"] == 100
    assert info["in_memory"] <= 20
    stop(h)
    h = start(queue_window=10)
    got = run_one_at_a_time(modern_worker(h, "w", ready=0), 100)
    by_priority = sorted(range(100), key=lambda i: (-(i % 3), i))
    assert got == [sent[i] for i in by_priority]
    assert monitor(h)["queued"] == 0


# -- refusing and holding back -----------------------------------------------------------


def test_over_the_high_water_mark_with_reject_policy_rejects_with_a_reason(
    start: Callable[..., Harness],
) -> None:
    h = start(high_water_mark=2, hwm_policy="reject")
    client = h.peer("frontend", "client")
    h.request(client)
    h.request(client)
    refused = send_request(client)
    reject = client.expect("REJECT")
    assert reject[2] == refused and "high-water mark" in reject[3]
    assert monitor(h)["rejected"] == 1


def test_over_the_high_water_mark_with_block_policy_clients_wait_and_nothing_is_lost(
    start: Callable[..., Harness],
) -> None:
    h = start(high_water_mark=2, hwm_policy="block")
    client = h.peer("frontend", "client")
    first = [h.request(client), h.request(client)]
    held = send_request(client)
    wait_for(lambda: monitor(h)["blocked"], what="the router to stop reading clients")
    assert not client.sock.poll(200)  # not read, so not acknowledged (yet)
    worker = modern_worker(h, "w")
    assert worker.expect("REQUEST")[1] == first[0]
    worker.send("DONE", first[0], "ok", "{}")
    assert worker.expect("REQUEST")[1] == first[1]
    assert client.expect("ACK")[2] == held  # read again below the mark
    worker.send("DONE", first[1], "ok", "{}")
    assert worker.expect("REQUEST")[1] == held
    assert not monitor(h)["blocked"]


def test_with_block_policy_a_burst_is_read_up_to_the_mark_exactly(
    start: Callable[..., Harness],
) -> None:
    # Many REQUESTs waiting at once: one drain reads them, counting the mark as it goes.
    h = start(high_water_mark=5, hwm_policy="block")
    client = h.peer("frontend", "client")
    sent = [send_request(client) for _ in range(12)]
    wait_for(lambda: monitor(h)["blocked"], what="the router to stop reading clients")
    acked = [client.expect("ACK")[2] for _ in range(5)]
    assert acked == sent[:5]
    assert not client.sock.poll(200)  # the rest is not read, so not acknowledged
    assert monitor(h)["queued"] == 5
    worker = modern_worker(h, "w")
    for msgid in sent:  # each DONE makes room for one more
        assert worker.expect("REQUEST")[1] == msgid
        worker.send("DONE", msgid, "ok", "{}")
    assert sorted(acked + [client.expect("ACK")[2] for _ in range(7)]) == sorted(sent)
    wait_for(lambda: not monitor(h)["blocked"], what="the router to read clients again")


def test_a_body_that_is_not_a_job_is_rejected(h: Harness) -> None:
    client = h.peer("frontend", "client")
    msgid = client.send("REQUEST", "default", "", "not json")
    reject = client.expect("REJECT")
    assert reject[2] == msgid and "bad body" in reject[3]


def test_a_reference_workers_reply_finishes_the_job_in_the_journal(
    start: Callable[..., Harness],
) -> None:
    # (The READY approximation for jobs without a reply is tested in test_queues.py.)
    h = start()
    worker = h.worker("reference")
    client = h.peer("frontend", "client")
    msgid = h.request(client, headers="reply-requested")
    assert worker.expect("REQUEST")[1] == msgid
    worker.send("REPLY", '{"value": 1}', msgid)  # the reference's report, then READY
    worker.send("READY")
    assert client.expect("REPLY")[2:] == ['{"value": 1}', msgid]
    wait_for(lambda: monitor(h)["in_flight"] == 0)
    stop(h)
    h = start()
    assert monitor(h)["queued"] == 0


# -- SCHEDULE / UNSCHEDULE kept for a scheduler ----------------------------------------


def test_kept_schedules_reach_a_scheduler_in_order_read_in_pages(
    start: Callable[..., Harness], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scheduler_relay, "SCHEDULES_PER_READ", 2)
    h = start()
    client = h.peer("frontend", "client")
    sent = []
    for n in range(5):
        job = JOB.replace("[1]", f"[{n}]")
        sent.append(client.send("SCHEDULE", "default", "", "60", job, ""))
        assert client.expect("ACK")[2] == sent[-1]
    assert h.ask("ROUTER_SHOW_SCHEDULERS")["buffered_schedule_messages"] == 5
    scheduler = h.peer("frontend", "sched")
    scheduler.send("INFORM", "", "scheduler")
    scheduler.expect("ACK")
    assert [scheduler.expect("SCHEDULE")[1] for _ in range(5)] == sent
    wait_for(lambda: monitor(h)["schedules_kept"] == 0, what="the journal to let them go")
    assert h.ask("ROUTER_SHOW_SCHEDULERS")["buffered_schedule_messages"] == 0


def test_a_schedule_the_router_cannot_read_is_kept_and_passed_on_as_it_is(
    h: Harness,
) -> None:
    # The scheduler, not the router, judges a SCHEDULE; the router keeps it whole.
    client = h.peer("frontend", "client")
    odd = client.send("SCHEDULE", "default", "", "60", "not json", "")
    assert client.expect("ACK")[2] == odd
    gone = client.send("UNSCHEDULE", "default", "", "-1", "not json either", "")
    assert client.expect("ACK")[2] == gone
    assert monitor(h)["schedules_kept"] == 2  # neither could be matched: both kept
    scheduler = h.peer("frontend", "sched")
    scheduler.send("INFORM", "", "scheduler")
    scheduler.expect("ACK")
    assert scheduler.expect("SCHEDULE")[1:] == [odd, "default", "", "60", "not json", ""]
    assert scheduler.expect("UNSCHEDULE")[1] == gone


def test_an_unschedule_drops_the_kept_schedule_of_its_timing_only(
    start: Callable[..., Harness],
) -> None:
    h = start()
    client = h.peer("frontend", "client")
    keep = client.send("SCHEDULE", "default", "", "60", JOB, "")
    other_timing = client.send("SCHEDULE", "default", "", "", JOB, "*/5 * * * *")
    drop = client.send("UNSCHEDULE", "default", "", "", JOB, "*/5 * * * *")  # that timing only
    assert {client.expect("ACK")[2] for _ in range(3)} == {keep, other_timing, drop}
    stop(h)
    h = start()
    scheduler = h.peer("frontend", "sched")
    scheduler.send("INFORM", "", "scheduler")
    scheduler.expect("ACK")
    # In the order received; the SCHEDULE of the unscheduled timing is not among them.
    assert scheduler.expect("SCHEDULE")[1] == keep
    assert scheduler.expect("UNSCHEDULE")[1] == drop
    wait_for(lambda: monitor(h)["schedules_kept"] == 0, what="the journal to let them go")


@pytest.fixture
def h(start: Callable[..., Harness]) -> Harness:
    return start()
