"""Only registered jobs or allowed modules resolve; nothing is imported on request."""

from __future__ import annotations

import logging
import sys
from contextlib import closing

import pytest

from django_eventmq.errors import JobNotAllowed, JobNotFound
from django_eventmq.protocol import JobBody, Reply
from django_eventmq.runtime import registry
from tests.fake_router import SAMPLE, FakeRouter, body
from tests.jobs_fixtures.running import payload, running, settings_for
from tests.jobs_registry import registered


def test_registered_job_resolves():
    func = registry.resolve(JobBody(path="tests.jobs_registry.registered", callable="greet"))
    assert func("ann") == "hello ann"
    assert "tests.jobs_registry.registered.greet" in registry.registered_names()


def test_unregistered_function_in_a_loaded_module_is_refused():
    with pytest.raises(JobNotAllowed, match="not registered"):
        registry.resolve(JobBody(path="tests.jobs_registry.registered", callable="not_a_job"))


def test_arbitrary_module_is_refused_without_importing_it():
    sys.modules.pop("tests.jobs_registry.allowed", None)
    with pytest.raises(JobNotAllowed):
        registry.resolve(JobBody(path="tests.jobs_registry.allowed", callable="double"))
    with pytest.raises(JobNotAllowed):
        registry.resolve(JobBody(path="os", callable="system", args=("true",)))
    assert "tests.jobs_registry.allowed" not in sys.modules


def test_allowed_module_resolves_functions_and_methods():
    allowed = ["tests.jobs_registry.allowed"]
    func = registry.resolve(JobBody(path="tests.jobs_registry.allowed", callable="double"), allowed)
    assert func(4) == 8
    body = JobBody(path="tests.jobs_registry.allowed:Counter", callable="add", class_args=(10,))
    assert registry.resolve(body, allowed)(5) == 15


def test_allowed_prefix_is_a_package_not_a_string_prefix():
    with pytest.raises(JobNotAllowed):
        registry.resolve(
            JobBody(path="tests.jobs_registry.allowed", callable="double"), ["tests.jobs_reg"]
        )


def test_missing_callable_in_allowed_module():
    with pytest.raises(JobNotFound, match="not found"):
        registry.resolve(JobBody(path="tests.jobs_registry.allowed", callable="nope"), ["tests"])


def test_job_modules_import_errors_name_the_module():
    with pytest.raises(JobNotFound, match="no_such_module"):
        registry.import_job_modules(["tests.jobs_registry.no_such_module"])
    assert registry.import_job_modules(["tests.jobs_registry.registered"]) == [
        "tests.jobs_registry.registered"
    ]


def test_decorated_job_still_runs_when_called():
    assert registered.greet("bo") == "hello bo"
    assert registered.greet.queue == "email"
    assert registered.greet.name == "tests.jobs_registry.registered.greet"


def test_a_job_manager_says_why_a_job_is_not_registered(caplog: pytest.LogCaptureFixture) -> None:
    """Through real worker processes: a @job whose module the job manager never
    imported is told apart from a function that is not a @job, or not there."""
    never_imported = "tests.jobs_registry.registered"  # has a @job, not in JOB_MODULES
    reasons = {}
    with (
        closing(FakeRouter()) as router,
        caplog.at_level(logging.WARNING, "django_eventmq.jobmanager"),
        running(settings_for(router, concurrency=1)),
    ):
        identity, _ = router.handshake()
        for case, job_body in {
            "never imported": body("greet", path=never_imported),
            "not decorated": body("not_a_job", "/nonexistent"),
            "missing": body("nope"),
        }.items():
            msgid = router.request(identity, job_body, reply=True)
            _, reply = router.expect(Reply, reply_to=msgid)
            error = payload(reply)["error"]
            assert error["type"] == "JobNotAllowed"
            reasons[case] = error["message"]
    assert reasons["never imported"] == (
        f"job '{never_imported}.greet' is not registered: its module '{never_imported}' was "
        "never imported by this job manager; list it in JOB_MODULES (EVENTMQ['JOB_MODULES'], "
        f"EMQ_JOB_MODULES or --job-module {never_imported}), or, under Django, move the @job "
        "into an installed app's jobs.py; refusing to run it"
    )
    assert (
        f"'not_a_job' in module '{SAMPLE}' (imported) is not decorated with @job"
        in (reasons["not decorated"])
    )
    assert f"module '{SAMPLE}' (imported) has no 'nope'" in reasons["missing"]
    for reason in ("not decorated", "missing"):
        assert "never imported" not in reasons[reason]
        assert "ALLOWED_JOB_MODULES" in reasons[reason]
    # The job manager's log line carries the same reason.
    logged = [r.getMessage() for r in caplog.records if "refused job" in r.getMessage()]
    assert len(logged) == 3
    assert any(reasons["never imported"] in line for line in logged)


OLD_GREET = "tests.jobs_registry.old_place.greet"  # no such module: the job moved


@pytest.fixture
def moved_greet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.ALIASES, OLD_GREET, "tests.jobs_registry.registered.greet")


def test_an_old_name_runs_the_job_registered_under_its_new_name(moved_greet):
    func = registry.resolve(JobBody(path="tests.jobs_registry.old_place", callable="greet"))
    assert func is registered.greet.func
    assert "tests.jobs_registry.old_place" not in sys.modules  # nothing imported for it


def test_an_old_name_is_allowed_on_a_queue_that_lists_it_or_its_new_name(moved_greet):
    new = "tests.jobs_registry.registered.greet"
    assert registry.allowed_on_queue(OLD_GREET, "q", {"q": [new]})
    assert registry.allowed_on_queue(OLD_GREET, "q", {"q": [OLD_GREET]})
    assert registry.allowed_on_queue(OLD_GREET, "q", {"q": ["tests.jobs_registry.registered.*"]})
    assert not registry.allowed_on_queue(OLD_GREET, "q", {"q": ["tests.other.*"]})
    with pytest.raises(JobNotAllowed, match="not allowed on queue"):
        registry.resolve(
            JobBody(path="tests.jobs_registry.old_place", callable="greet"),
            queue="q",
            queue_allowed={"q": ["tests.other.*"]},
        )


def test_an_old_name_of_an_unregistered_job_is_refused_naming_where_it_lives_now(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setitem(registry.ALIASES, "tests.jobs_registry.old_place.f", "tests.moved.here.f")
    with pytest.raises(JobNotAllowed, match=r"its module 'tests\.moved\.here' was never imported"):
        registry.resolve(JobBody(path="tests.jobs_registry.old_place", callable="f"))


def test_the_django_tasks_runner_keeps_the_name_one_release_gave_it():
    # That release registered it in the backend's module; its journals and
    # result rows may name it so (see django_eventmq.tasks_runner).
    assert registry.canonical_name("django_eventmq.tasks_backend.run_task") == (
        "django_eventmq.tasks_runner.run_task"
    )
    assert registry.canonical_name("app.jobs.send") == "app.jobs.send"
