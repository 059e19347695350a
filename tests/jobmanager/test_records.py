"""Outcome records reach the hooks module's record_results in batches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from django_eventmq.protocol import Done, Reply
from tests.fake_router import SAMPLE, FakeRouter, body
from tests.jobs_fixtures.record_hooks import read_batches, read_records
from tests.jobs_fixtures.running import payload, running, settings_for
from tests.support import wait_for

HOOKS = "tests.jobs_fixtures.record_hooks"
KEYS = {
    "msgid",
    "queue",
    "job",
    "args",
    "kwargs",
    "status",
    "value",
    "error",
    "attempt",
    "jobmanager",
    "pid",
    "started",
    "finished",
}


@pytest.fixture
def records_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "records.jsonl"
    monkeypatch.setenv("EMQ_TEST_RECORDS_FILE", str(path))
    return path


def of(path: Path, msgid: str) -> list[dict[str, Any]]:
    return [r for r in read_records(path) if r["msgid"] == msgid]


def statuses(path: Path, msgid: str) -> list[str]:
    return [r["status"] for r in of(path, msgid)]


def test_reply_requested_jobs_are_recorded_running_then_final(
    router: FakeRouter, records_file: Path
) -> None:
    with running(settings_for(router), hooks=HOOKS):
        identity, _ = router.handshake(features=True)
        ok = router.request(identity, body("slow", 0.3), reply=True, queue="default")
        bad = router.request(identity, body("fail", "nope"), reply=True)
        quiet = router.request(identity, body("add", 1, 1))  # no reply asked: not recorded
        for msgid in (ok, bad, quiet):
            router.expect(Done, job_msgid=msgid)
        wait_for(lambda: statuses(records_file, ok) == ["running", "succeeded"], 10, "ok records")
        wait_for(lambda: statuses(records_file, bad)[-1:] == ["failed"], 10, "failed record")
    running_rec, final = of(records_file, ok)
    assert set(final) == KEYS
    assert final["job"] == f"{SAMPLE}.slow" and final["args"] == [0.3] and final["kwargs"] == {}
    assert (final["queue"], final["value"], final["error"], final["attempt"]) == (
        "default",
        "slept 0.3",
        None,
        1,
    )
    assert final["jobmanager"] == "test-jm" and final["pid"] == running_rec["pid"] > 0
    assert running_rec["finished"] is None
    assert final["started"] == running_rec["started"] <= final["finished"]
    failed = of(records_file, bad)[-1]
    assert failed["value"] is None
    assert failed["error"]["type"] == "ValueError" and failed["error"]["message"] == "nope"
    assert "raise ValueError" in failed["error"]["traceback"]
    assert of(records_file, quiet) == []


def test_record_all_results_records_every_job_in_few_batches(
    router: FakeRouter, records_file: Path
) -> None:
    settings = settings_for(router, record_all_results=True, prefetch=4)
    with running(settings, hooks=HOOKS):
        identity, _ = router.handshake(features=True)
        msgids = [router.request(identity, body("add", i, i)) for i in range(40)]
        for msgid in msgids:
            router.expect(Done, job_msgid=msgid)

        def all_final() -> bool:
            finals = {r["msgid"] for r in read_records(records_file) if r["status"] == "succeeded"}
            return finals >= set(msgids)

        wait_for(all_final, 10, "a final record of each job")
    assert len(read_batches(records_file)) < 40  # batched, not one call per job


def test_retries_are_recorded_with_their_attempt(
    router: FakeRouter, records_file: Path, tmp_path: Path
) -> None:
    counter = tmp_path / "calls.txt"
    settings = settings_for(router, retry_backoff_base=0.05)
    with running(settings, hooks=HOOKS):
        identity, _ = router.handshake()  # a reference router: the job manager retries
        msgid = router.request(identity, body("flaky", str(counter), 2), reply=True, retry_count=2)
        assert payload(router.expect(Reply, reply_to=msgid, timeout=15)[1]) == {"value": 3}
        wait_for(lambda: "succeeded" in statuses(records_file, msgid), 10, "final record")
    records = of(records_file, msgid)
    finals = [(r["status"], r["attempt"]) for r in records if r["status"] != "running"]
    assert finals == [("retrying", 1), ("retrying", 2), ("succeeded", 3)]
    assert of(records_file, msgid)[0]["error"] is None


def test_timeout_and_cancel_are_recorded(
    router: FakeRouter, records_file: Path, tmp_path: Path
) -> None:
    started = tmp_path / "started.txt"
    with running(settings_for(router), hooks=HOOKS):
        identity, _ = router.handshake(features=True)
        slow = router.request(identity, body("slow", 30), reply=True, timeout=1)
        other = router.request(identity, body("slow", 30, str(started)), reply=True)
        wait_for(started.exists, 10, "the other job started")
        router.cancel(identity, other)
        assert router.expect(Done, job_msgid=other)[1].status == "cancelled"
        assert router.expect(Done, job_msgid=slow, timeout=15)[1].status == "timeout"
        # Both children were stopped; the records they held reach the replacements.
        wait_for(lambda: statuses(records_file, slow) == ["running", "timed_out"], 10, "timeout")
        wait_for(lambda: statuses(records_file, other) == ["running", "cancelled"], 10, "cancel")
    assert of(records_file, slow)[-1]["error"]["type"] == "TimeoutError"


def test_without_record_results_hook_nothing_is_sent(
    router: FakeRouter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes = tmp_path / "hooks.txt"
    monkeypatch.setenv("EMQ_TEST_HOOKS_FILE", str(notes))
    settings = settings_for(router, concurrency=1, record_all_results=True)
    with running(settings, hooks="tests.jobs_fixtures.hooks") as jm:
        identity, _ = router.handshake(features=True)
        msgid = router.request(identity, body("add", 1, 1), reply=True)
        router.expect(Done, job_msgid=msgid)
        assert jm.pool.can_record is False
        assert jm.recorder.records == []
