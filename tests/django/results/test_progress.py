"""The last progress on the JobResult row, written by the batched upsert (one query a batch)."""

from __future__ import annotations

import time

import pytest

from django_eventmq.models.results import JobResult
from django_eventmq.result_recording import record_results
from tests.support import result_record

pytestmark = pytest.mark.django_db


def rec(msgid: str, status: str, attempt: int = 1, **extra):
    fields = {"job": "tests.system.streaming.jobs.long_job", "args": [3, 0.1], **extra}
    return result_record(msgid, status, attempt=attempt, **fields)


def progress_of(msgid: str):
    return JobResult.objects.values_list("progress", flat=True).get(msgid=msgid)


def test_progress_updates_a_running_row_one_query_per_batch(django_assert_num_queries):
    started = time.time()
    with django_assert_num_queries(1):
        record_results([rec("p1", "running", started=started)])
    assert progress_of("p1") is None
    with django_assert_num_queries(1):
        record_results([rec("p1", "running", started=started, progress={"step": 1})])
    assert progress_of("p1") == {"step": 1}
    # Many progress records of many jobs in one batch: one query, the latest of each wins.
    batch = [
        rec(f"p{n}", "running", started=started, progress={"step": step})
        for step in (2, 3, 4)
        for n in range(1, 50)
    ]
    with django_assert_num_queries(1):
        record_results(batch)
    assert progress_of("p1") == {"step": 4} and progress_of("p49") == {"step": 4}
    assert JobResult.objects.get(msgid="p1").started is not None


def test_the_finished_row_keeps_the_last_progress():
    now = time.time()
    record_results([rec("f1", "running", started=now, progress=0.5)])
    record_results([rec("f1", "succeeded", started=now, finished=now + 1, value="done")])
    stored = JobResult.objects.get(msgid="f1")
    assert (stored.status, stored.value, stored.progress) == ("succeeded", "done", 0.5)


def test_progress_and_the_outcome_in_one_batch():
    now = time.time()
    record_results(
        [
            rec("b1", "running", started=now),
            rec("b1", "running", started=now, progress="90%"),
            rec("b1", "failed", finished=now + 1, error={"type": "E", "message": "m"}),
        ]
    )
    stored = JobResult.objects.get(msgid="b1")
    assert (stored.status, stored.progress, stored.exc_type) == ("failed", "90%", "E")
    assert stored.started is not None  # carried over from the running records


def test_a_late_progress_record_does_not_reopen_a_finished_row():
    now = time.time()
    record_results([rec("l1", "succeeded", started=now, finished=now, value=1)])
    record_results([rec("l1", "running", started=now, progress="late")])
    stored = JobResult.objects.get(msgid="l1")
    assert (stored.status, stored.progress) == ("succeeded", None)


def test_a_new_attempt_keeps_the_previous_progress_until_it_reports():
    now = time.time()
    record_results([rec("a1", "running", started=now, progress="first try")])
    record_results([rec("a1", "running", attempt=2, started=now + 5)])
    assert progress_of("a1") == "first try"
    record_results([rec("a1", "running", attempt=2, started=now + 5, progress="second try")])
    assert progress_of("a1") == "second try"
    # A stale record of the first attempt changes nothing.
    record_results([rec("a1", "running", attempt=1, started=now, progress="stale")])
    assert progress_of("a1") == "second try"
