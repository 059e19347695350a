"""System checks: one test per stable id, and a clean bill for good settings."""

from __future__ import annotations

import pytest
from django.core import checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from django_eventmq.checks import check_settings


def ids(messages):
    return [m.id for m in messages]


def test_default_settings_pass(settings):
    settings.EVENTMQ = {}
    assert check_settings() == []


def test_checks_are_registered_under_their_tag():
    assert "eventmq" in checks.registry.registry.tags_available()


def test_e001_unknown_setting(settings):
    settings.EVENTMQ = {"CONCURENCY": 2}
    [error] = check_settings()
    assert error.id == "django_eventmq.E001"
    assert "unknown setting 'CONCURENCY'" in error.msg
    assert "EVENTMQ" in error.hint


def test_e001_names_every_unknown_setting_once(settings):
    # BROKR_ADDR ends like an address: it is still an unknown key, not a bad address (E003).
    settings.EVENTMQ = {"CONCURENCY": 2, "BROKR_ADDR": "tcp://127.0.0.1:1"}
    [error] = check_settings()
    assert error.id == "django_eventmq.E001"
    assert "'CONCURENCY' (did you mean 'CONCURRENCY'?)" in error.msg
    assert "'BROKR_ADDR' (did you mean 'BROKER_ADDR'?)" in error.msg


def test_e001_an_address_variable_that_names_no_setting(settings, emq_env):
    # The build reads only the EMQ_* variables it knows: a mistyped address would go unseen.
    emq_env(BROKR_ADDR="tcp://127.0.0.1:1")
    [error] = check_settings()
    assert error.id == "django_eventmq.E001"
    assert "'BROKR_ADDR' (did you mean 'BROKER_ADDR'?)" in error.msg
    assert "environment variable EMQ_BROKR_ADDR" in error.msg


def test_e001_invalid_value(settings):
    settings.EVENTMQ = {"CONCURRENCY": 0}
    [error] = check_settings()
    assert error.id == "django_eventmq.E001"
    assert "CONCURRENCY" in error.msg


def test_e001_settings_that_contradict(settings):
    settings.EVENTMQ = {"HEARTBEAT_INTERVAL": 10, "HEARTBEAT_TIMEOUT": 5}
    [error] = check_settings()
    assert error.id == "django_eventmq.E001"
    assert "HEARTBEAT_TIMEOUT must be longer" in error.msg


def test_e001_eventmq_not_a_dict(settings):
    settings.EVENTMQ = "tcp://127.0.0.1:1"
    assert ids(check_settings()) == ["django_eventmq.E001"]


def test_e001_from_the_environment(settings, emq_env):
    emq_env(PREFETCH="many")
    [error] = check_settings()
    assert error.id == "django_eventmq.E001"
    assert "PREFETCH" in error.msg


def test_e002_bad_queue_spec(settings):
    settings.EVENTMQ = {"QUEUES": "email:lots,default"}
    [error] = check_settings()
    assert error.id == "django_eventmq.E002"
    assert "weight of 'email'" in error.msg
    assert "email:30,default:10" in error.hint


def test_e002_bad_queue_name_from_environment(settings, emq_env):
    emq_env(QUEUES="bad name!")
    [error] = check_settings()
    assert error.id == "django_eventmq.E002"
    assert "EMQ_QUEUES" in error.msg


def test_e003_bad_address(settings):
    settings.EVENTMQ = {"BACKEND_ADDR": "localhost:47290", "QUEUES": "a:1"}
    [error] = check_settings()
    assert error.id == "django_eventmq.E003"
    assert "BACKEND_ADDR" in error.msg
    assert "tcp://127.0.0.1:47291" in error.hint


def test_e002_and_e003_together_without_a_duplicate_e001(settings):
    settings.EVENTMQ = {"BROKER_ADDR": "nowhere", "QUEUES": ""}
    assert sorted(ids(check_settings())) == ["django_eventmq.E002", "django_eventmq.E003"]


def test_empty_broker_address_is_allowed(settings):
    settings.DEBUG = True
    settings.EVENTMQ = {"BROKER_ADDR": ""}
    assert check_settings() == []


def test_e004_job_module_not_importable(settings):
    settings.EVENTMQ = {"JOB_MODULES": ["example_project.shop.jobs", "no_such_app.jobs"]}
    [error] = check_settings()
    assert error.id == "django_eventmq.E004"
    assert "no_such_app.jobs" in error.msg


def test_w001_eager_in_production(settings):
    settings.DEBUG = False
    settings.EVENTMQ = {"EAGER": True}
    [warning] = check_settings()
    assert warning.id == "django_eventmq.W001"
    assert warning.level == checks.WARNING


def test_eager_with_debug_is_fine(settings):
    settings.DEBUG = True
    settings.EVENTMQ = {"EAGER": True}
    assert check_settings() == []


def test_w002_no_broker_in_production(settings):
    settings.DEBUG = False
    settings.EVENTMQ = {"BROKER_ADDR": ""}
    assert ids(check_settings()) == ["django_eventmq.W002"]


def test_manage_check_fails_on_an_error(settings):
    settings.EVENTMQ = {"QUEUES": "email:x"}
    with pytest.raises(SystemCheckError, match=r"django_eventmq\.E002"):
        call_command("check", tags=["eventmq"])


def test_e001_a_route_to_a_bad_queue_name(settings):
    settings.EVENTMQ = {"ROUTES": {"billing.jobs.*": "billing queue"}}
    [error] = check_settings()
    assert error.id == "django_eventmq.E001"
    assert "ROUTES['billing.jobs.*']: 'billing queue' is not a queue name" in error.msg
