"""The job lifecycle end to end: a real router and job manager (``python -m django``
``emq_router`` / ``emq_jobmanager``) on loopback, workers with Django set up on a
temporary SQLite file, which the test reads to see what was recorded.

Covers each header (reply-requested, retry-count, timeout, guarantee, priority),
cancel of a queued and of a running job, and the Django Tasks backend.
"""

from __future__ import annotations

import html
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from django_eventmq.errors import JobError
from django_eventmq.protocol import Headers
from tests.django.results import jobs
from tests.support import ROOT, Proc, ResultStack, clean_environ, migrated_env, wait_for

SETTINGS = "tests.django.results.e2e_settings"
ANY_PORT = "tcp://127.0.0.1:*"


def django_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "django", *args]


@pytest.fixture(scope="module")
def db_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A migrated SQLite file and the environment that selects it."""
    tmp = tmp_path_factory.mktemp("lifecycle")
    return migrated_env(
        {
            "DJANGO_SETTINGS_MODULE": SETTINGS,
            "EMQ_LIFECYCLE_DB": str(tmp / "db.sqlite3"),
            "EMQ_JOURNAL_PATH": str(tmp / "journal.sqlite3"),
            "PYTHONPATH": str(ROOT),
        }
    )


class Stack(ResultStack):
    """A router and a job manager; ``frontend`` is where clients connect."""

    def __init__(
        self,
        env: dict[str, str],
        concurrency: int,
        journal: str,
        prefetch: int = 4,
        jobmanagers: int = 1,
    ) -> None:
        self.env = {**env, "EMQ_JOURNAL_PATH": journal}
        self.db = Path(env["EMQ_LIFECYCLE_DB"])
        self.procs: list[Proc] = []
        router = self._start(
            "emq_router", "--frontend", ANY_PORT, "--backend", ANY_PORT, "--admin", ANY_PORT
        )
        ready = router.wait_output(r"router ready: frontend=(\S+) backend=(\S+) admin=(\S+)")
        self.frontend, backend = ready.group(1), ready.group(2)
        started = [
            self._start(
                "emq_jobmanager",
                *("--broker", backend, "--concurrency", str(concurrency)),
                *("--prefetch", str(prefetch)),
            )
            for _ in range(jobmanagers)
        ]
        for jobmanager in started:
            jobmanager.wait_output(r"jobmanager ready: ", timeout=60)

    def _start(self, *args: str) -> Proc:
        proc = Proc(django_cmd(*args), env=self.env)
        self.procs.append(proc)
        return proc

    def row_when(self, msgid: str, status: str) -> dict[str, Any]:
        """The row of ``msgid`` once it has ``status``."""
        return self.wait_row(msgid, lambda row: row["status"] == status, f"status {status}")


@pytest.fixture(scope="module")
def shared(db_env, tmp_path_factory) -> Iterator[Stack]:
    """One stack with two workers for the tests that need no particular order."""
    stack = Stack(db_env, 2, str(tmp_path_factory.mktemp("j") / "journal.sqlite3"))
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def single(db_env, tmp_path) -> Iterator[Stack]:
    """A stack with ONE worker and no prefetch, for tests about which job runs when.

    Priority orders the jobs waiting in the router; jobs a job manager has
    prefetched are already its own, so these tests turn prefetch off.
    """
    stack = Stack(db_env, 1, str(tmp_path / "journal.sqlite3"), prefetch=0)
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def use(eventmq_settings) -> Callable[[Stack], Stack]:
    def point(stack: Stack) -> Stack:
        eventmq_settings(BROKER_ADDR=stack.frontend, ACK_TIMEOUT=5)
        return stack

    return point


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _pid_of(log: Path, prefix: str) -> int:
    line = next(line for line in jobs.lines(log) if line.startswith(prefix))
    return int(line.split()[-1])


# -- reply-requested -------------------------------------------------------------------
def test_reply_requested_wait_gets_the_value_and_it_is_recorded(shared, use):
    use(shared)
    handle = jobs.add.delay(2, 3)
    assert handle.wait(timeout=30) == 5
    row = shared.row_when(handle, "succeeded")
    assert json.loads(row["value"]) == 5
    assert row["job"] == "tests.django.results.jobs.add"
    assert json.loads(row["args"]) == [2, 3]
    assert row["attempts"] == 1 and row["jobmanager"] and row["pid"]
    assert row["started"] and row["finished"] and row["duration"] is not None


def test_a_failure_reaches_wait_with_its_class_and_message(shared, use):
    use(shared)
    handle = jobs.explode.delay("nope")
    with pytest.raises(JobError) as caught:
        handle.wait(timeout=30)
    assert (caught.value.exc_type, caught.value.message) == ("KeyError", "'nope'")
    assert "raise KeyError" in caught.value.traceback
    row = shared.row_when(handle, "failed")
    assert (row["exc_type"], row["exc_message"]) == ("KeyError", "'nope'")


def admin_field(page: str, field: str) -> str:
    """The text the admin shows for ``field`` on a read-only change page."""
    found = re.search(
        rf'<div class="[^"]*field-{field}[^"]*">.*?<div class="readonly">(.*?)</div>', page, re.S
    )
    assert found is not None, f"no {field} on the page"
    return html.unescape(re.sub(r"<[^>]+>", "", found.group(1))).strip()


def test_a_failed_jobs_admin_page_shows_its_exception_and_traceback(shared, use):
    use(shared)
    handle = jobs.explode.delay("shown in the admin")
    with pytest.raises(JobError):
        handle.wait(timeout=30)
    shared.row_when(handle, "failed")
    # A staff user opens the row the job manager recorded (in the stack's database).
    done = subprocess.run(
        [sys.executable, "-m", "tests.django.results.admin_page", str(handle)],
        cwd=ROOT,
        env={**clean_environ(), **shared.env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    status, _, page = done.stdout.partition("\n")
    assert status == "200"
    assert admin_field(page, "status") == "failed"
    assert admin_field(page, "exc_type") == "KeyError"
    assert admin_field(page, "exc_message") == "'shown in the admin'"
    traceback = admin_field(page, "pretty_traceback")
    assert traceback.startswith("Traceback (most recent call last):")
    assert 'tests/django/results/jobs.py", line' in traceback
    assert "raise KeyError(message)" in traceback
    assert traceback.endswith("KeyError: 'shown in the admin'")


# -- retry-count -----------------------------------------------------------------------
def test_retry_count_runs_a_failing_job_again_until_it_succeeds(shared, use, tmp_path):
    use(shared)
    log = tmp_path / "runs"
    handle = jobs.flaky.delay(str(log), 2)  # fails twice; retry-count:2 allows that
    assert handle.wait(timeout=60) == "finally"
    assert len(jobs.lines(log)) == 3
    shared.row_when(handle, "succeeded")


def test_retry_count_gives_up_after_n_retries(shared, use, tmp_path):
    use(shared)
    log = tmp_path / "runs"
    handle = jobs.always_fails.delay(str(log))  # retry-count:1: two runs in all
    with pytest.raises(JobError, match="always"):
        handle.wait(timeout=60)
    assert jobs.lines(log) == ["run", "run"]


def test_retries_are_recorded_with_their_attempt_number(shared, use, tmp_path):
    use(shared)
    flaky = jobs.flaky.delay(str(tmp_path / "flaky"), 2)
    failing = jobs.always_fails.delay(str(tmp_path / "failing"))
    assert flaky.wait(timeout=60) == "finally"
    with pytest.raises(JobError):
        failing.wait(timeout=60)
    assert shared.row_when(flaky, "succeeded")["attempts"] == 3
    assert shared.row_when(failing, "failed")["attempts"] == 2


def test_every_retried_row_ends_failed_whichever_processes_ran_its_attempts(db_env, use, tmp_path):
    """Two job managers of two worker processes each: a job's attempts run in any of the
    four, one that ran an earlier attempt too, and each row must still end ``failed``
    with its last attempt (it stayed ``retrying`` when the last attempt ran in a process
    that had run an earlier one than the row's)."""
    env = {**db_env, "EMQ_RETRY_BACKOFF_BASE": "0.05"}  # the retries come back quickly
    stack = Stack(env, 2, str(tmp_path / "journal.sqlite3"), jobmanagers=2)
    try:
        use(stack)
        log = tmp_path / "runs"
        handles = [jobs.always_raises.delay(str(log), n) for n in range(40)]
        wait_for(lambda: len(jobs.lines(log)) >= 160, 120, "4 runs of each of the 40 jobs")
        runs = [line.split() for line in jobs.lines(log)]
        assert sorted(int(n) for n, _ in runs) == sorted(list(range(40)) * 4)  # once each
        assert len({pid for _, pid in runs}) > 1
        for handle in handles:
            row = stack.wait_row(handle, lambda r: r["status"] == "failed", "failed")
            assert (row["attempts"], row["exc_type"]) == (4, "RuntimeError")
    finally:
        stack.stop()


# -- timeout ---------------------------------------------------------------------------
def test_timeout_kills_the_jobs_process(shared, use, tmp_path):
    use(shared)
    log = tmp_path / "runs"
    handle = jobs.sleeps_too_long.delay(str(log))
    with pytest.raises(JobError) as caught:
        handle.wait(timeout=60)
    assert caught.value.exc_type == "TimeoutError"
    row = shared.row_when(handle, "timed_out")
    pid = _pid_of(log, "start")
    wait_for(lambda: process_gone(pid), 30, f"worker {pid} stopped")
    assert "done" not in jobs.lines(log)
    assert row["pid"] == pid
    # The job manager replaced the worker: jobs still run.
    assert jobs.add.delay(1, 1).wait(timeout=30) == 2


# -- guarantee -------------------------------------------------------------------------
def test_guarantee_returns_once_the_router_stored_the_job(shared, use):
    use(shared)
    handle = jobs.important_with_reply.delay(4)  # returns after the router's ACK
    assert handle.wait(timeout=30) == 40


# -- cancel ----------------------------------------------------------------------------
@pytest.mark.django_db  # cancel() also marks a queued row cancelled (this process's table)
def test_cancel_a_queued_job_and_a_running_one(single, use, tmp_path):
    use(single)
    log, release = tmp_path / "log", tmp_path / "release"
    blocker = jobs.gate.delay(str(log), str(release))
    wait_for(lambda: jobs.lines(log), 30, "the gate job to start")
    victim_log = tmp_path / "victim"
    victim = jobs.marker.delay(str(victim_log), "victim")
    victim.cancel()
    with pytest.raises(JobError) as caught:
        victim.wait(timeout=30)
    assert caught.value.exc_type == "Cancelled"
    # Now the running one: its process is stopped.
    blocker.cancel()
    with pytest.raises(JobError) as caught:
        blocker.wait(timeout=30)
    assert caught.value.exc_type == "Cancelled"
    pid = _pid_of(log, "gate started")
    wait_for(lambda: process_gone(pid), 30, f"worker {pid} stopped")
    assert "gate done" not in jobs.lines(log)
    single.row_when(blocker, "cancelled")
    # The queue moves on, and the cancelled job never ran.
    assert jobs.marker.delay(str(victim_log), "after").wait(timeout=30) == "after"
    assert jobs.lines(victim_log) == ["after"]


# -- priority --------------------------------------------------------------------------
def test_higher_priority_is_handed_out_first(single, use, tmp_path):
    use(single)
    log, release = tmp_path / "log", tmp_path / "release"
    gate = jobs.gate.delay(str(log), str(release))
    wait_for(lambda: jobs.lines(log), 30, "the gate job to start")
    handles = [
        jobs.marker.send((str(log), label), headers=Headers(reply_requested=True, priority=p))
        for label, p in (("low", -5), ("mid", 0), ("high", 9))
    ]
    jobs.important.delay(0)  # guarantee: once ACKed, the router holds all three
    release.touch()
    assert gate.wait(timeout=30) == "opened"
    assert [h.wait(timeout=30) for h in handles] == ["low", "mid", "high"]
    assert jobs.lines(log)[2:] == ["high", "mid", "low"]


# -- the Django Tasks backend ----------------------------------------------------------
needs_django_tasks = pytest.mark.skipif(
    importlib.util.find_spec("django.tasks") is None,
    reason="django.tasks is new in Django 6.0",
)


def run_tasks_client(stack: Stack, scenario: str, tmp_path: Path) -> dict[str, Any]:
    env = {**stack.env, "EMQ_BROKER_ADDR": stack.frontend}
    return run_client(env, scenario, tmp_path, stack.logs)


def run_client(
    env: dict[str, str], scenario: str, tmp_path: Path, logs: Callable[[], str] = str
) -> dict[str, Any]:
    """Run the Tasks client process (``e2e_tasks_client``) with ``env``; its JSON output."""
    log, release = tmp_path / "log", tmp_path / "release"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.django.results.e2e_tasks_client",
            scenario,
            str(log),
            str(release),
        ],
        cwd=ROOT,
        env={**clean_environ(), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr + logs()
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    out["log"] = jobs.lines(log)
    return out


@needs_django_tasks
def test_tasks_run_on_job_managers_with_results_and_signals(shared, tmp_path):
    out = run_tasks_client(shared, "basic", tmp_path)
    assert out["first_status"] in ("READY", "RUNNING", "SUCCESSFUL")
    ok, bad = out["ok"], out["bad"]
    assert (ok["status"], ok["value"], ok["attempts"]) == ("SUCCESSFUL", 42, 1)
    assert ok["started_at"] >= ok["enqueued_at"] and ok["worker_ids"]
    assert (bad["status"], bad["errors"]) == ("FAILED", ["builtins.ValueError"])
    # task_started / task_finished were sent in the worker, around the task.
    for result, status in ((ok, "SUCCESSFUL"), (bad, "FAILED")):
        mine = [line for line in out["log"] if result["id"] in line]
        assert mine == [
            f"signal started {result['id']} RUNNING",
            f"signal finished {result['id']} {status}",
        ]


@needs_django_tasks
def test_tasks_run_after_is_honoured(shared, tmp_path):
    out = run_tasks_client(shared, "defer", tmp_path)
    deferred = out["deferred"]
    assert deferred["status"] == "SUCCESSFUL"
    assert deferred["started_at"] >= out["run_after"]


@needs_django_tasks
def test_tasks_priority_is_honoured(single, tmp_path):
    out = run_tasks_client(single, "priority", tmp_path)
    assert [r["status"] for r in out["results"]] == ["SUCCESSFUL"] * 3
    assert [line for line in out["log"] if line in ("low", "mid", "high")] == [
        "high",
        "mid",
        "low",
    ]


@needs_django_tasks
def test_tasks_results_follow_djangos_contract(shared, tmp_path):
    out = run_tasks_client(shared, "contract", tmp_path)
    # get_result() of a READY task is the result enqueue() returned; refresh() keeps it.
    assert out["ready_result_matches"] and out["enqueued_at_kept"]
    assert (out["ok"]["status"], out["return_value"]) == ("SUCCESSFUL", 42)
    bad, stopped = out["bad"], out["stopped"]
    assert (bad["status"], bad["errors"], out["bad_class"]) == (
        "FAILED",
        ["builtins.ValueError"],
        "ValueError",
    )
    assert "ValueError: task went wrong" in out["bad_traceback"]
    # A task that raised KeyboardInterrupt failed with it; its worker went on.
    assert (stopped["status"], stopped["errors"], out["stopped_class"]) == (
        "FAILED",
        ["builtins.KeyboardInterrupt"],
        "KeyboardInterrupt",
    )
    assert stopped["attempts"] == 1


@needs_django_tasks
def test_a_task_is_running_while_every_worker_process_is_busy(single, tmp_path):
    # ONE worker process, busy with the task itself: its RUNNING record (written
    # by a worker process, which has Django) must not wait for the task to end.
    out = run_tasks_client(single, "busy", tmp_path)
    running, done = out["running"], out["done"]
    assert running["status"] == "RUNNING", out["seen"]
    assert running["started_at"] is not None and running["worker_ids"]
    assert (done["status"], done["value"]) == ("SUCCESSFUL", "released")


def test_running_and_progress_are_recorded_while_every_worker_process_is_busy(
    single, use, tmp_path
):
    use(single)
    release = tmp_path / "release"
    handle = jobs.gate_with_progress.delay(str(tmp_path / "log"), str(release))
    # Its ONE worker process is running the job: the records are written anyway.
    row = single.wait_row(handle, lambda r: r["progress"] is not None, "progress")
    assert row["status"] == "running" and row["started"]
    assert json.loads(row["progress"]) == {"at": "waiting"}
    release.touch()
    assert handle.wait(timeout=30) == "opened"


@needs_django_tasks
def test_enqueue_raises_when_the_router_is_down_and_leaves_no_row(db_env, tmp_path):
    router = Proc(
        django_cmd("emq_router", "--frontend", ANY_PORT, "--backend", ANY_PORT),
        env={**db_env, "EMQ_JOURNAL_PATH": str(tmp_path / "journal.sqlite3")},
    )
    try:
        frontend = router.wait_output(r"router ready: frontend=(\S+)").group(1)
    finally:
        router.signal(signal.SIGKILL)  # it crashed
        router.stop()
    env = {
        **db_env,
        "EMQ_BROKER_ADDR": frontend,
        "EMQ_ACK_TIMEOUT": "0.2",
        "EMQ_ACK_RETRIES": "1",
        "EMQ_SEND_TIMEOUT": "0.5",  # how long the client lingers at exit with unsent copies
    }
    out = run_client(env, "router_down", tmp_path)
    assert out["raised"] == "django_eventmq.errors.BrokerUnavailable"
    assert out["rows_after"] == out["rows_before"]  # no READY row left behind


@needs_django_tasks
def test_a_task_whose_worker_dies_on_every_run_ends_failed(shared, tmp_path):
    # The router sets it aside (poisoned) after POISON_AFTER (3) deaths; the job
    # manager that reported the last one records its end (it stayed READY).
    out = run_tasks_client(shared, "dies", tmp_path)
    pids = [line.split()[1] for line in out["log"] if line.startswith("dies ")]
    assert len(pids) == 3 and len(set(pids)) == 3, out  # three runs, each in a new process
    done = out["done"]
    assert done["status"] == "FAILED", (out, shared.logs())
    assert done["errors"] == ["django_eventmq.tasks_backend.WorkerDied"]
    assert [w.rsplit(":", 1)[1] for w in done["worker_ids"]] == pids
    row = shared.row(done["id"])
    assert row is not None and (row["status"], row["exc_type"]) == ("failed", "WorkerDied")
    assert "exited with code 1" in row["exc_message"] and "set it aside" in row["exc_message"]
    assert shared.row(done["id"], "django_eventmq_deadletter") is None  # the router lists it


@needs_django_tasks
def test_a_task_handed_out_again_shows_both_runs(shared, tmp_path):
    # The worker process running the task is killed; the router hands the task
    # out again and it runs in another process.
    out = run_tasks_client(shared, "redelivery", tmp_path)
    first, second = out["pids"]
    assert first != second
    assert "FAILED" not in out["seen"]  # the death was not the task's end
    done = out["done"]
    assert (done["status"], done["value"]) == ("SUCCESSFUL", "released")
    assert done["attempts"] == 2
    assert [w.rsplit(":", 1)[1] for w in done["worker_ids"]] == [str(first), str(second)]
