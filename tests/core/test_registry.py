"""Only registered jobs or allowed modules resolve; nothing is imported on request."""

from __future__ import annotations

import sys

import pytest

from django_eventmq.core import registry
from django_eventmq.errors import JobNotAllowed, JobNotFound
from django_eventmq.protocol import JobBody
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
