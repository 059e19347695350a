"""The Django Tasks backend, in-process: what enqueue sends, get_result, validation, the runner.

The router is a raw ROUTER in a thread that ACKs each REQUEST (or does not);
the dispatcher job is called directly here (the end-to-end tests run it in
real job-manager workers).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

pytest.importorskip("django.tasks", reason="django.tasks is new in Django 6.0")

from django.core import checks
from django.tasks import TaskResultStatus, task_backends
from django.tasks.base import TASK_REFRESH_ATTRS
from django.tasks.exceptions import (
    InvalidTask,
    InvalidTaskBackend,
    TaskResultDoesNotExist,
    TaskResultMismatch,
)
from django.tasks.signals import task_enqueued, task_finished, task_started

from django_eventmq import tasks_backend, tasks_runner
from django_eventmq.errors import BrokerUnavailable, JobNotAllowed
from django_eventmq.jobmanager.job_runner import JobRunner
from django_eventmq.models.results import JobResult
from django_eventmq.protocol import parse_job
from django_eventmq.protocol.status import JobStatus
from django_eventmq.result_recording import record_results
from django_eventmq.tasks_backend import EventMQBackend, WorkerDied
from tests.django.results import tasks
from tests.django.results.conftest import ack
from tests.support import wait_for

pytestmark = pytest.mark.django_db

BACKEND = "django_eventmq.tasks_backend.EventMQBackend"


@pytest.fixture
def emq_tasks(settings, thread_router):
    """The backend, and a router that stores (ACKs) every REQUEST."""
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default", "email"]}}
    return thread_router(lambda request, count: [ack(request)], ACK_TIMEOUT=5, ACK_RETRIES=0)


def test_backend_declares_what_it_supports(emq_tasks):
    backend = task_backends["default"]
    assert isinstance(backend, EventMQBackend)
    assert backend.supports_get_result and backend.supports_defer and backend.supports_priority


def test_enqueue_sends_the_dispatcher_with_priority_and_delay(emq_tasks, tmp_path):
    run_after = datetime.now(UTC) + timedelta(hours=1)
    result = tasks.multiply.using(priority=7, run_after=run_after, queue_name="email").enqueue(
        str(tmp_path / "log"), 6, b=7
    )
    [request] = emq_tasks.received
    assert request.msgid == result.id
    assert request.headers.guarantee  # enqueue returned after the router's ACK
    assert request.queue == "email"
    assert request.headers.reply_requested
    assert request.headers.priority == 7
    assert request.headers.delay_until == pytest.approx(run_after.timestamp())
    body = parse_job(request.body_text)
    # The old, stable name (see tasks_backend.RUNNER_PATH): older job managers know only it.
    assert body.name == "django_eventmq.tasks_runner.run_task"
    assert list(body.args[:5]) == [
        "tests.django.results.tasks.multiply",
        [str(tmp_path / "log"), 6],
        {"b": 7},
        "default",
        result.id,
    ]
    assert result.status == TaskResultStatus.READY


def test_enqueue_writes_a_ready_result_and_sends_the_signal(emq_tasks, tmp_path):
    seen = []

    def receiver(sender, task_result, **kwargs):
        seen.append((sender, task_result.id))

    task_enqueued.connect(receiver)
    try:
        result = tasks.multiply.enqueue(str(tmp_path / "log"), 2, 3)
    finally:
        task_enqueued.disconnect(receiver)
    assert seen == [(EventMQBackend, result.id)]
    fetched = tasks.multiply.get_result(result.id)
    assert fetched.status == TaskResultStatus.READY
    assert fetched.args == [str(tmp_path / "log"), 2, 3]
    assert fetched.enqueued_at is not None


def test_get_result_after_the_worker_recorded_it(emq_tasks, tmp_path):
    result = tasks.multiply.enqueue(str(tmp_path / "log"), 2, 3)
    record_results([_runner_record(result.id, "running", attempt=1)])
    result.refresh()
    assert result.status == TaskResultStatus.RUNNING
    record_results([_runner_record(result.id, "succeeded", attempt=1, value=6)])
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 6
    assert result.attempts == 1 and result.worker_ids == ["jm:99"]
    assert result.finished_at is not None


def test_a_redelivered_task_counts_both_runs(emq_tasks, tmp_path):
    result = tasks.multiply.enqueue(str(tmp_path / "log"), 2, 3)
    died = {"type": "WorkerDied", "message": "worker process exited"}
    record_results([_runner_record(result.id, "running", attempt=1)])
    record_results([_runner_record(result.id, "retrying", attempt=1, error=died)])
    result.refresh()
    assert result.status == TaskResultStatus.READY  # the router hands it out again
    again = {"jobmanager": "jm2", "pid": 7}
    record_results([_runner_record(result.id, "running", attempt=1, **again)])
    record_results([_runner_record(result.id, "succeeded", attempt=1, value=6, **again)])
    result.refresh()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 6)
    assert (result.attempts, result.worker_ids) == (2, ["jm:99", "jm2:7"])


def test_get_result_of_a_failed_task(emq_tasks, tmp_path):
    result = tasks.broken.enqueue(str(tmp_path / "log"))
    record_results(
        [
            _runner_record(
                result.id,
                "failed",
                attempt=1,
                error={"type": "ValueError", "message": "task went wrong", "traceback": "TB"},
            )
        ]
    )
    fetched = task_backends["default"].get_result(result.id)
    assert fetched.status == TaskResultStatus.FAILED
    assert [(e.exception_class_path, e.traceback) for e in fetched.errors] == [
        ("builtins.ValueError", "TB")
    ]
    assert fetched.errors[0].exception_class is ValueError
    with pytest.raises(ValueError, match="failed"):
        _ = fetched.return_value


@pytest.mark.parametrize(
    ("error", "path", "cls"),
    [
        # What a worker records for a task: the importable module.qualname.
        (
            {"type": "JobNotAllowed", "path": "django_eventmq.errors.JobNotAllowed"},
            "django_eventmq.errors.JobNotAllowed",
            JobNotAllowed,
        ),
        # A job manager's own error, by its bare name.
        ({"type": "WorkerDied"}, "django_eventmq.tasks_backend.WorkerDied", WorkerDied),
        ({"type": "TimeoutError"}, "builtins.TimeoutError", TimeoutError),
    ],
)
def test_every_recorded_error_names_an_importable_exception_class(
    emq_tasks, tmp_path, error, path, cls
):
    result = tasks.broken.enqueue(str(tmp_path / "log"))
    record_results([_runner_record(result.id, "failed", attempt=1, error=error)])
    [failure] = task_backends["default"].get_result(result.id).errors
    assert (failure.exception_class_path, failure.exception_class) == (path, cls)


def test_get_result_of_a_ready_task_is_the_result_enqueue_returned(emq_tasks, tmp_path):
    result = tasks.multiply.enqueue(str(tmp_path / "log"), 2, 3)
    fetched = tasks.multiply.get_result(result.id)
    assert {a: getattr(fetched, a) for a in TASK_REFRESH_ATTRS} == {
        a: getattr(result, a) for a in TASK_REFRESH_ATTRS
    }
    assert (fetched.enqueued_at, fetched.args, fetched.kwargs) == (
        result.enqueued_at,
        result.args,
        result.kwargs,
    )
    enqueued_at = result.enqueued_at
    result.refresh()
    assert result.enqueued_at == enqueued_at
    assert result.status == TaskResultStatus.READY


def test_async_enqueue_get_result_and_refresh(emq_tasks, tmp_path):
    from asgiref.sync import async_to_sync

    result = async_to_sync(tasks.multiply.aenqueue)(str(tmp_path / "log"), 2, 3)
    assert [r.msgid for r in emq_tasks.received] == [result.id]
    fetched = async_to_sync(tasks.multiply.aget_result)(result.id)
    assert (fetched.id, fetched.status, fetched.enqueued_at) == (
        result.id,
        TaskResultStatus.READY,
        result.enqueued_at,
    )
    record_results([_runner_record(result.id, "succeeded", attempt=1, value=6)])
    async_to_sync(result.arefresh)()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 6)


def test_get_result_through_another_task_is_a_mismatch(emq_tasks, tmp_path):
    result = tasks.multiply.enqueue(str(tmp_path / "log"), 2, 3)
    with pytest.raises(TaskResultMismatch):
        tasks.broken.get_result(result.id)


def test_enqueue_raises_and_leaves_no_ready_row_when_the_router_never_acks(settings, thread_router):
    settings.TASKS = {"default": {"BACKEND": BACKEND}}
    router = thread_router(lambda request, count: [], ACK_TIMEOUT=0.1, ACK_RETRIES=1)
    with pytest.raises(BrokerUnavailable, match="did not acknowledge"):
        tasks.multiply.enqueue("/nowhere", 1, 2)
    msgids = {r.msgid for r in router.received}
    assert len(router.received) == 2 and len(msgids) == 1  # the same task sent again
    assert not JobResult.objects.exists()
    with pytest.raises(TaskResultDoesNotExist):
        tasks.multiply.get_result(msgids.pop())


def test_guarantee_off_returns_without_waiting_for_the_ack(settings, thread_router):
    settings.TASKS = {"default": {"BACKEND": BACKEND, "OPTIONS": {"GUARANTEE": False}}}
    router = thread_router(lambda request, count: [], ACK_TIMEOUT=30, ACK_RETRIES=3)
    result = tasks.multiply.enqueue("/nowhere", 1, 2)  # would take 2 minutes waiting for ACKs
    assert tasks.multiply.get_result(result.id).status == TaskResultStatus.READY
    received = wait_for(lambda: router.received, 10, "the REQUEST")
    assert not received[0].headers.guarantee


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"GUARANTE": True}, r"unknown key\(s\) 'GUARANTE'.*valid keys: GUARANTEE \(bool\)"),
        ({"GUARANTEE": "yes"}, r"\['OPTIONS'\]\['GUARANTEE'\] must be a bool, got 'yes'"),
        (["GUARANTEE"], r"must be a dict, got list; valid keys: GUARANTEE"),
    ],
)
def test_bad_options_are_refused_naming_the_key(settings, options, message):
    settings.TASKS = {"default": {"BACKEND": BACKEND, "OPTIONS": options}}
    with pytest.raises(InvalidTaskBackend, match=message):
        task_backends["default"]
    # `manage.py check` builds every backend, so it stops there too.
    with pytest.raises(InvalidTaskBackend, match="TASKS\\['default'\\]"):
        checks.run_checks()


def test_check_reports_the_backend_without_the_app(settings):
    settings.TASKS = {"default": {"BACKEND": BACKEND}}
    assert "django_eventmq.E010" not in {e.id for e in checks.run_checks()}
    settings.INSTALLED_APPS = [a for a in settings.INSTALLED_APPS if a != "django_eventmq"]
    [error] = [e for e in checks.run_checks() if e.id == "django_eventmq.E010"]
    assert "django_eventmq is not in INSTALLED_APPS" in error.msg
    assert "INSTALLED_APPS" in error.hint


def test_get_result_of_an_unknown_id(emq_tasks):
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result("no-such-id")


def test_validation(emq_tasks):
    with pytest.raises(InvalidTask, match="not valid for backend"):
        tasks.multiply.using(queue_name="reports")
    with pytest.raises(InvalidTask, match="aware"):
        tasks.multiply.using(run_after=datetime(2030, 1, 1))
    with pytest.raises(InvalidTask, match="priority"):
        tasks.multiply.using(priority=101)


def test_queue_names_must_be_ours(settings, broker):
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": []}}
    with pytest.raises(InvalidTask, match="letters, digits"):
        tasks.multiply.using(queue_name="no spaces")


def test_runner_runs_the_task_and_sends_started_and_finished(tmp_path):
    log = str(tmp_path / "log")
    events = []

    def started(sender, task_result, **kwargs):
        events.append(("started", task_result.status, task_result.id))

    def finished(sender, task_result, **kwargs):
        events.append(("finished", task_result.status, task_result.return_value))

    task_started.connect(started)
    task_finished.connect(finished)
    try:
        value = tasks_runner.run_task(
            "tests.django.results.tasks.multiply", [log, 4, 5], {}, "default", "tid", 1.0
        )
    finally:
        task_started.disconnect(started)
        task_finished.disconnect(finished)
    assert value == 20
    assert events == [
        ("started", TaskResultStatus.RUNNING, "tid"),
        ("finished", TaskResultStatus.SUCCESSFUL, 20),
    ]
    # The test module's own receivers noted the signals too.
    assert (
        Path(log).read_text().splitlines()[-1]
        == f"signal finished tid {TaskResultStatus.SUCCESSFUL}"
    )


def test_runner_sends_finished_and_reraises_when_the_task_fails(tmp_path):
    log = str(tmp_path / "log")
    with pytest.raises(ValueError, match="task went wrong"):
        tasks_runner.run_task("tests.django.results.tasks.broken", [log], {}, "default", "tid2")
    assert (
        Path(log).read_text().splitlines()[-1] == f"signal finished tid2 {TaskResultStatus.FAILED}"
    )


def test_a_task_raising_keyboard_interrupt_fails_with_that_class(tmp_path):
    log = str(tmp_path / "log")
    body = json.dumps(
        [
            "run",
            {
                "path": tasks_backend.RUNNER_PATH,
                "callable": tasks_backend.RUNNER_CALLABLE,
                "args": ["tests.django.results.tasks.interrupted", [log], {}, "default", "tid3"],
                "kwargs": {},
            },
        ]
    )
    # A worker's runner: the job fails (the worker process goes on), as Django's
    # backends record any other exception.
    status, payload = JobRunner().run(body)
    error = json.loads(payload)
    assert status == JobStatus.FAILED
    assert (error["type"], error["path"]) == ("KeyboardInterrupt", "builtins.KeyboardInterrupt")
    assert "raise KeyboardInterrupt" in error["traceback"]
    assert Path(log).read_text().splitlines()[-1] == (
        f"signal finished tid3 {TaskResultStatus.FAILED}"
    )


def test_runner_passes_the_context(tmp_path):
    log = str(tmp_path / "log")
    assert tasks_runner.run_task("tests.django.results.tasks.with_context", [log], {}) == 1


@pytest.mark.parametrize(
    "path",
    [
        "os.system",  # a function, not a task
        "tests.django.results.jobs.add",  # a @job, not a task
        "not_imported_anywhere.module.thing",  # never imported because a message says so
        "tests.django.results.tasks",  # a module
    ],
)
def test_runner_refuses_what_is_not_a_registered_task(path):
    with pytest.raises(JobNotAllowed, match="not a Django task"):
        tasks_runner.run_task(path, [], {})


def test_the_runner_is_a_registered_job_under_its_wire_name_and_its_last_releases():
    from django_eventmq.protocol import JobBody
    from django_eventmq.runtime import registry

    wire = JobBody(path=tasks_backend.RUNNER_PATH, callable=tasks_backend.RUNNER_CALLABLE)
    assert wire.name == "django_eventmq.tasks_runner.run_task"  # in journals and result rows
    # The name the release that kept it in the backend's module registered it under.
    between = JobBody(path="django_eventmq.tasks_backend", callable="run_task")
    assert registry.resolve(wire) is tasks_runner.run_task.func
    assert registry.resolve(between) is tasks_runner.run_task.func


def test_a_body_naming_the_runner_as_the_last_release_did_runs_the_task_in_a_worker(tmp_path):
    # What a journal or the results of the release that registered the runner
    # in the backend's module may hold: the alias, never an import, runs it.
    log = str(tmp_path / "log")
    body = json.dumps(
        [
            "run",
            {
                "path": "django_eventmq.tasks_backend",
                "callable": "run_task",
                "args": ["tests.django.results.tasks.multiply", [log, 3, 4], {}, "default", "t"],
                "kwargs": {},
            },
        ]
    )
    status, payload = JobRunner().run(body)
    assert (status, json.loads(payload)) == ("ok", {"value": 12})


def _runner_record(msgid, status, *, attempt, value=None, error=None, jobmanager="jm", pid=99):
    return {
        "msgid": msgid,
        "queue": "default",
        "job": "django_eventmq.tasks_runner.run_task",
        "args": json.loads(
            json.dumps(["tests.django.results.tasks.multiply", ["/p", 2, 3], {}, "default", msgid])
        ),
        "kwargs": {},
        "status": status,
        "value": value,
        "error": error,
        "attempt": attempt,
        "jobmanager": jobmanager,
        "pid": pid,
        "started": 1.0,
        "finished": 2.0 if status != "running" else None,
    }
