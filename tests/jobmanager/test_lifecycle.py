"""Job lifecycle in a job manager with real worker processes: timeout, retry, cancel."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from django_eventmq.protocol import Done, Ready, Reply
from tests.fake_router import FakeRouter, body
from tests.jobs_fixtures.running import payload, running, settings_for
from tests.support import wait_for


def lines(path: Path) -> list[str]:
    return path.read_text().split("\n")[:-1] if path.exists() else []


# -- timeout ---------------------------------------------------------------------------------


def test_timeout_kills_and_replaces_the_worker_and_the_queued_job_still_runs(
    router: FakeRouter, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    started, after = tmp_path / "started.txt", tmp_path / "after.txt"
    # One child, two slots: the second job waits in the same child's pipe. Here and below,
    # PREFETCH_BUDGET=0 fixes the prefetch (it would otherwise start at 0 and adapt).
    with (
        caplog.at_level(logging.WARNING),
        running(settings_for(router, concurrency=1, prefetch=1, prefetch_budget=0)),
    ):
        identity, _ = router.handshake(features=True)
        router.wait_count(Ready, 2)
        stuck = router.request(identity, body("slow", 30, str(started)), timeout=1)
        queued = router.request(identity, body("record", str(after), "next"), reply=True)
        # Generous deadlines: on a loaded machine a worker process (the first, then
        # its replacement) can take many seconds to start.
        _, done = router.expect(Done, job_msgid=stuck, timeout=60)
        assert done.status == "timeout"
        assert payload(done)["value"] == "TimeoutError"
        assert payload(done)["error"]["type"] == "TimeoutError"
        _, done = router.expect(Done, job_msgid=queued, timeout=60)
        assert done.status == "ok"
        old_pid = int(lines(started)[0].split()[1])
        assert payload(done)["value"] != old_pid  # ran in the replacement
    assert lines(started) == [f"start {old_pid}"]  # never finished: it was killed
    timed_out = [r.getMessage() for r in caplog.records if "timed out" in r.getMessage()]
    assert len(timed_out) == 1 and stuck in timed_out[0]


def test_timeout_with_a_reference_router_replies_timeouterror_then_ready(
    router: FakeRouter,
) -> None:
    with running(settings_for(router, concurrency=1)):
        identity, _ = router.handshake()
        router.wait_count(Ready, 1)
        msgid = router.request(identity, body("slow", 30), reply=True, timeout=1)
        _, reply = router.expect(Reply, reply_to=msgid, timeout=15)
        assert payload(reply)["value"] == "TimeoutError"
        router.wait_count(Ready, 2)  # the slot is offered again
        again = router.request(identity, body("add", 1, 1), reply=True)
        assert payload(router.expect(Reply, reply_to=again)[1]) == {"value": 2}


def test_time_waiting_in_the_pipe_does_not_count_towards_the_timeout(
    router: FakeRouter,
) -> None:
    with running(settings_for(router, concurrency=1, prefetch=1, prefetch_budget=0)):
        identity, _ = router.handshake(features=True)
        router.wait_count(Ready, 2)
        first = router.request(identity, body("slow", 1.2))
        second = router.request(identity, body("slow", 0.3), timeout=1)
        assert router.expect(Done, job_msgid=first, timeout=15)[1].status == "ok"
        # It waited ~1.2 s behind the first job but ran for 0.3 s.
        assert router.expect(Done, job_msgid=second, timeout=15)[1].status == "ok"


# -- retry -----------------------------------------------------------------------------------


def test_reference_mode_retries_locally_with_backoff(router: FakeRouter, tmp_path: Path) -> None:
    counter = tmp_path / "calls.txt"
    settings = settings_for(router, retry_backoff_base=0.05, retry_backoff_cap=0.2)
    with running(settings):
        identity, _ = router.handshake()
        router.wait_count(Ready, 2)
        msgid = router.request(identity, body("flaky", str(counter), 2), reply=True, retry_count=3)
        _, reply = router.expect(Reply, reply_to=msgid, timeout=15)
        assert payload(reply) == {"value": 3}  # failed twice, succeeded on the third run
        router.pump(0.1)
        assert router.count(Reply) == 0  # no other REPLY: the failures were not replied


def test_reference_mode_gives_up_after_retry_count(router: FakeRouter, tmp_path: Path) -> None:
    counter = tmp_path / "calls.txt"
    settings = settings_for(router, retry_backoff_base=0.05)
    with running(settings):
        identity, _ = router.handshake()
        msgid = router.request(identity, body("flaky", str(counter), 9), reply=True, retry_count=1)
        _, reply = router.expect(Reply, reply_to=msgid, timeout=15)
        assert payload(reply)["error"]["message"] == "failure 2 of 9"
        assert counter.read_text() == "2"


def test_done_mode_leaves_the_retry_to_the_router(router: FakeRouter, tmp_path: Path) -> None:
    counter = tmp_path / "calls.txt"
    with running(settings_for(router)):
        identity, _ = router.handshake(features=True)
        msgid = router.request(identity, body("flaky", str(counter), 1), retry_count=2)
        _, done = router.expect(Done, job_msgid=msgid)
        assert done.status == "retry"
        info = payload(done)
        assert info["attempt"] == 1
        assert info["error"]["type"] == "RuntimeError"
        assert info["error"]["message"] == "failure 1 of 1"
        # The router sends it again (saying which attempt it is): now it succeeds.
        again = body("flaky", str(counter), 1)
        router.request(identity, again, msgid=msgid, retry_count=2, extra=("attempt:2",))
        _, done = router.expect(Done, job_msgid=msgid)
        assert (done.status, payload(done)) == ("ok", {"value": 2})
        # A plain failure without retry-count is final.
        final = router.request(identity, body("fail"))
        assert router.expect(Done, job_msgid=final)[1].status == "failed"


# -- cancel ----------------------------------------------------------------------------------


def test_cancel_a_queued_job_drops_it(router: FakeRouter, tmp_path: Path) -> None:
    started, cancelled = tmp_path / "started.txt", tmp_path / "cancelled.txt"
    with running(settings_for(router, concurrency=1, prefetch=2, prefetch_budget=0)):
        identity, _ = router.handshake(features=True)
        router.wait_count(Ready, 3)
        running_job = router.request(identity, body("slow", 0.8, str(started)))
        wait_for(started.exists, 10, "the first job started")
        queued = router.request(identity, body("record", str(cancelled), "ran"))
        last = router.request(identity, body("add", 1, 2))
        router.cancel(identity, queued)
        _, done = router.expect(Done, job_msgid=queued)
        assert done.status == "cancelled"
        assert router.expect(Done, job_msgid=running_job)[1].status == "ok"
        assert payload(router.expect(Done, job_msgid=last)[1]) == {"value": 3}
    assert not cancelled.exists()
    assert len(lines(started)) == 2  # the running job was left alone (start, done)


def test_cancel_a_running_job_stops_its_worker_and_keeps_the_queued_one(
    router: FakeRouter, tmp_path: Path
) -> None:
    started, after = tmp_path / "started.txt", tmp_path / "after.txt"
    with running(settings_for(router, concurrency=1, prefetch=1, prefetch_budget=0)):
        identity, _ = router.handshake(features=True)
        router.wait_count(Ready, 2)
        stuck = router.request(identity, body("slow", 30, str(started)))
        queued = router.request(identity, body("record", str(after), "next"))
        # Its line, not the file: record() creates the file before it writes, and
        # the cancel must not land in between (the pid is read from the line).
        wait_for(lambda: lines(started), 10, "the job started")
        router.cancel(identity, stuck)
        _, done = router.expect(Done, job_msgid=stuck)
        assert (done.status, payload(done)["error"]["type"]) == ("cancelled", "Cancelled")
        _, done = router.expect(Done, job_msgid=queued, timeout=15)
        assert done.status == "ok"
        old_pid = int(lines(started)[0].split()[1])
        assert payload(done)["value"] != old_pid
        # The replacement takes new work.
        again = router.request(identity, body("add", 2, 2))
        assert payload(router.expect(Done, job_msgid=again)[1]) == {"value": 4}
    assert lines(started) == [f"start {old_pid}"]


def test_cancel_of_an_unknown_job_is_ignored(router: FakeRouter) -> None:
    with running(settings_for(router)):
        identity, _ = router.handshake(features=True)
        router.cancel(identity, "no-such-job")
        msgid = router.request(identity, body("add", 1, 1))
        assert router.expect(Done, job_msgid=msgid)[1].status == "ok"
        router.pump(0.1)
        assert router.count(Done) == 0  # nothing answered the unknown cancel
