"""The results table: batched upserts (one query per batch), ordering rules, and the readers."""

from __future__ import annotations

import logging
import sys
import time
import uuid

import pytest

from django_eventmq import worker_hooks
from django_eventmq.client.handles import JobHandle, ResultNotReady
from django_eventmq.errors import JobError
from django_eventmq.models.results import JobResult
from django_eventmq.result_recording import record_cancel, record_queued, record_results
from tests.pg_support import require_postgres
from tests.support import ROOT, clean_environ, result_record, run_checked

pytestmark = pytest.mark.django_db


def rec(msgid: str, status: str, attempt: int = 1, **extra):
    fields = {"job": "tests.django.results.jobs.add", "args": [1, 2], "kwargs": {"k": "v"}, **extra}
    return result_record(msgid, status, attempt=attempt, **fields)


def row(msgid: str) -> JobResult:
    return JobResult.objects.get(msgid=msgid)


def test_a_batch_is_one_query(django_assert_num_queries):
    now = time.time()
    batch = [
        rec(f"m{n}", "succeeded", value={"n": n}, started=now - 2, finished=now) for n in range(200)
    ]
    with django_assert_num_queries(1):
        assert record_results(batch) == 200
    stored = row("m7")
    assert stored.status == "succeeded"
    assert stored.value == {"n": 7}
    assert stored.args == [1, 2] and stored.kwargs == {"k": "v"}
    assert stored.jobmanager == "jm-1" and stored.pid == 4242
    assert stored.duration == pytest.approx(2.0)
    assert stored.started is not None and stored.finished is not None


def test_worker_hook_writes_through_results(django_assert_num_queries):
    with django_assert_num_queries(1):
        worker_hooks.record_results([rec("h1", "running"), rec("h2", "running")])
    assert JobResult.objects.filter(status="running").count() == 2


def test_running_then_finished_in_one_batch_keeps_started():
    started = time.time() - 1
    record_results(
        [
            rec("a", "running", started=started),
            rec("a", "failed", finished=started + 1, error=_error()),
        ]
    )
    stored = row("a")
    assert stored.status == "failed"
    assert stored.exc_type == "KeyError" and stored.exc_message == "'x'"
    assert stored.traceback.startswith("Traceback")
    assert stored.started is not None and stored.duration == pytest.approx(1.0)


def test_a_late_running_record_does_not_undo_the_outcome():
    record_results([rec("b", "succeeded", value=3)])
    record_results([rec("b", "running")])
    assert row("b").status == "succeeded" and row("b").value == 3


def test_a_later_attempt_replaces_an_earlier_one():
    record_results([rec("c", "retrying", attempt=1, error=_error())])
    record_results([rec("c", "running", attempt=2)])
    assert (row("c").status, row("c").attempts) == ("running", 2)
    record_results([rec("c", "failed", attempt=1)])  # stale, from another process
    assert (row("c").status, row("c").attempts) == ("running", 2)
    record_results([rec("c", "succeeded", attempt=2, value="ok")])
    assert (row("c").status, row("c").value, row("c").exc_type) == ("succeeded", "ok", "")


def test_wire_status_words_are_understood():
    record_results([rec("d1", "ok", value=1), rec("d2", "timeout"), rec("d3", "retry")])
    assert [row(m).status for m in ("d1", "d2", "d3")] == ["succeeded", "timed_out", "retrying"]


def test_a_bad_record_is_logged_and_the_rest_written(caplog):
    with caplog.at_level(logging.WARNING, "django_eventmq.results"):
        count = record_results([rec("e1", "exploded"), {"status": "running"}, rec("e2", "running")])
    assert count == 1
    assert list(JobResult.objects.values_list("msgid", flat=True)) == ["e2"]
    assert caplog.text.count("ignored a job result record") == 2


def test_queued_row_then_worker_records():
    record_queued("f", queue="email", job="tests.django.results.jobs.add", args=[1], kwargs={})
    queued = row("f")
    assert (queued.status, queued.attempts, queued.jobmanager) == ("queued", 0, "")
    assert queued.enqueued is not None
    record_results([rec("f", "running", attempt=1)])
    running = row("f")
    assert running.status == "running"
    assert running.enqueued == queued.enqueued  # the worker does not know it; kept
    assert running.created == queued.created


def test_client_rows_never_replace_job_manager_rows():
    record_results([rec("g", "running")])
    record_cancel("g")  # cancel of a running job: the job manager records the outcome
    assert row("g").status == "running"
    record_queued("g", queue="default", job="x.y")
    assert row("g").status == "running" and row("g").job == "tests.django.results.jobs.add"


def test_cancel_of_a_queued_job():
    record_queued("h", queue="default", job="tests.django.results.jobs.add")
    record_cancel("h")
    cancelled = row("h")
    assert cancelled.status == "cancelled" and cancelled.finished is not None
    assert cancelled.job == "tests.django.results.jobs.add"
    with pytest.raises(JobError) as caught:
        _ = JobHandle("h").result
    assert caught.value.exc_type == "Cancelled"


def test_cancel_of_an_unrecorded_job_then_the_job_manager_knows_better():
    record_cancel("i")
    assert row("i").status == "cancelled"
    record_results([rec("i", "succeeded", value=1)])  # it had finished already
    assert row("i").status == "succeeded"


@pytest.mark.parametrize(
    "runner",
    # The name on the wire (and registered), and the one a release registered it under.
    ["django_eventmq.tasks_runner.run_task", "django_eventmq.tasks_backend.run_task"],
)
def test_task_runner_records_show_the_task(runner):
    record_results(
        [
            rec(
                "t",
                "succeeded",
                job=runner,
                args=["tests.django.results.tasks.multiply", ["/p", 2, 3], {}, "default", "t", 1.0],
                kwargs={},
            )
        ]
    )
    stored = row("t")
    assert stored.job == "tests.django.results.tasks.multiply"
    assert stored.args == ["/p", 2, 3] and stored.kwargs == {}


def test_handle_status_and_result_read_the_table():
    handle = JobHandle("r1")
    assert handle.status is None
    with pytest.raises(ResultNotReady, match="no result"):
        _ = handle.result
    record_results([rec("r1", "running")])
    assert handle.status == "running"
    with pytest.raises(ResultNotReady, match="not finished"):
        _ = handle.result
    record_results([rec("r1", "succeeded", value={"answer": 42})])
    assert handle.result == {"answer": 42}
    record_results([rec("r2", "failed", error=_error())])
    with pytest.raises(JobError) as caught:
        _ = JobHandle("r2").result
    assert (caught.value.exc_type, caught.value.message) == ("KeyError", "'x'")


def _error():
    return {"type": "KeyError", "message": "'x'", "traceback": "Traceback (most recent call last)"}


def _died() -> dict[str, str]:
    return {"type": "WorkerDied", "message": "worker process pid=4242 exited", "traceback": ""}


def _first_run_then_redelivery(msgid: str) -> tuple[list[dict], list[dict]]:
    """A job's first run, whose worker process died, and its run once handed out again.

    The router keeps the attempt number of a job handed out again after a loss.
    """
    first = [
        rec(msgid, "running", started=1.0),
        rec(msgid, "retrying", started=1.0, finished=2.0, error=_died()),
    ]
    again = [
        rec(msgid, "running", jobmanager="jm-2", pid=77, started=3.0),
        rec(msgid, "succeeded", jobmanager="jm-2", pid=77, started=3.0, finished=4.0, value=5),
    ]
    return first, again


@pytest.mark.parametrize("one_batch", [False, True])
def test_a_redelivered_run_is_recorded_with_every_worker(one_batch):
    first, again = _first_run_then_redelivery("rd")
    record_queued("rd", queue="default", job="tests.django.results.jobs.add")
    if one_batch:
        record_results(first + again)
    else:
        for record in first + again:
            record_results([record])
    stored = row("rd")
    assert (stored.status, stored.value, stored.attempts) == ("succeeded", 5, 1)
    assert stored.workers == ["jm-1:4242", "jm-2:77"]
    assert (stored.jobmanager, stored.pid) == ("jm-2", 77)


def test_a_late_record_of_an_earlier_run_is_ignored():
    first, again = _first_run_then_redelivery("late")
    record_results(first[:1])
    record_results(again[:1])  # handed out again before the first run's death was written
    record_results(first[1:])
    stored = row("late")
    assert (stored.status, stored.jobmanager, stored.exc_type) == ("running", "jm-2", "")
    record_results(again[1:])
    assert row("late").status == "succeeded"
    assert row("late").workers == ["jm-1:4242", "jm-2:77"]


@pytest.mark.parametrize("one_batch", [False, True])
def test_the_first_runs_records_written_after_the_redelivered_run_started_are_ignored(one_batch):
    """The first run's job manager writes late (its only worker process is being replaced)."""
    first, again = _first_run_then_redelivery("slow")
    record_results(again[:1])
    if one_batch:
        record_results(first)
    else:
        for record in first:
            record_results([record])
    assert (row("slow").status, row("slow").jobmanager) == ("running", "jm-2")
    record_results(again[1:])
    stored = row("slow")
    assert (stored.status, stored.value, stored.jobmanager, stored.exc_type) == (
        "succeeded",
        5,
        "jm-2",
        "",
    )


def test_a_late_record_of_an_earlier_attempt_on_another_worker_is_ignored():
    """A retry ran elsewhere; the first attempt's record arrives after it."""
    record_results([rec("retried", "succeeded", attempt=2, jobmanager="jm-2", pid=77, value=1)])
    record_results([rec("retried", "retrying", started=1.0, finished=2.0, error=_error())])
    stored = row("retried")
    assert (stored.status, stored.attempts, stored.value) == ("succeeded", 2, 1)


def test_a_repeated_record_of_the_last_run_adds_no_worker():
    record_results([rec("same", "running")])
    record_results([rec("same", "running"), rec("same", "succeeded", value=1)])
    record_results([rec("same", "succeeded", value=1)])
    assert row("same").workers == ["jm-1:4242"]


@pytest.mark.django_db(transaction=True)
def test_the_records_thread_looks_after_its_connection_as_a_job_does(monkeypatch):
    """Worker processes write records in a thread of their own, with its own connection."""
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection, connections

    if connection.vendor != "postgresql":
        pytest.skip("needs a database server whose session can be ended (EMQ_TEST_DB=postgres)")

    def write(msgid: str) -> object:
        worker_hooks.record_results([rec(msgid, "running")])
        return connections["default"].connection

    def backend() -> int:
        return int(connections["default"].connection.info.backend_pid)

    with ThreadPoolExecutor(1) as thread:  # one thread, as in a worker process
        # CONN_MAX_AGE = 0: no connection is kept between batches, as between jobs.
        assert thread.submit(write, "c1").result() is None
        # Persistent connections with health checks: one the server ended (it
        # restarted, say) is replaced before the next batch, which is not lost.
        monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", None)
        assert thread.submit(write, "c2").result() is not None
        ended = thread.submit(backend).result()
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [ended])
        thread.submit(write, "c3").result()
        assert thread.submit(backend).result() != ended
        thread.submit(connections.close_all).result()
    assert set(JobResult.objects.values_list("msgid", flat=True)) == {"c1", "c2", "c3"}


@pytest.mark.parametrize("one_batch", [False, True])
def test_a_retry_in_an_earlier_runs_process_is_recorded(one_batch):
    """Attempts ran in processes 101, 102, then 101 again: the row follows the attempts."""
    retried = [
        rec("back", "retrying", attempt=1, pid=101, error=_error()),
        rec("back", "retrying", attempt=2, pid=102, error=_error()),
        rec("back", "running", attempt=3, pid=101),
        rec("back", "failed", attempt=3, pid=101, error=_error()),
    ]
    if one_batch:
        record_results(retried)
    else:
        for record in retried:
            record_results([record])
    stored = row("back")
    assert (stored.status, stored.attempts, stored.pid) == ("failed", 3, 101)
    assert stored.workers == ["jm-1:101", "jm-1:102", "jm-1:101"]
    record_results([rec("back", "retrying", attempt=2, pid=102, error=_error())])  # late
    assert (row("back").status, row("back").attempts) == ("failed", 3)


@pytest.mark.postgres
def test_the_rules_hold_on_postgresql():
    """This module's tests again, on PostgreSQL (the upsert's SQL is written per database).

    In a pytest of its own with ``EMQ_TEST_DB=postgres``: a database of its own
    (``test_<name>``, which pytest-django creates and drops; dropped here too
    if that run is cut short).
    """
    from django.db import connection

    if connection.vendor == "postgresql":
        pytest.skip("this run is on PostgreSQL already")
    import psycopg

    dsn = require_postgres()
    name = f"emq_results_{uuid.uuid4().hex[:10]}"
    env = {k: v for k, v in clean_environ().items() if not k.startswith("PYTEST_")}
    env.update(EMQ_TEST_DB="postgres", EMQ_TEST_PG_NAME=name, PYTHONPATH=str(ROOT))
    try:
        out = run_checked(
            [
                sys.executable,
                "-m",
                "pytest",
                __file__,
                "-q",
                "-p",
                "no:cacheprovider",
                "-k",
                "not test_the_rules_hold_on_postgresql",
            ],
            cwd=ROOT,
            env=env,
            timeout=300,
        )
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "test_{name}" WITH (FORCE)')
    assert " passed" in out and "skipped" not in out, out  # the PostgreSQL-only test ran too
