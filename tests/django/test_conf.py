"""django_eventmq.conf: settings from settings.EVENTMQ and EMQ_*, rebuilt when EVENTMQ changes."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.test import override_settings

from django_eventmq import conf
from django_eventmq.errors import ConfigurationError
from django_eventmq.runtime import config


def test_app_config_is_installed_with_its_name():
    app = apps.get_app_config("django_eventmq")
    assert type(app).__name__ == "DjangoEventMQConfig"
    assert app.verbose_name == "EventMQ"


def test_settings_come_from_eventmq(eventmq_settings):
    eventmq_settings(QUEUES="email:30,default:10", CONCURRENCY=3, EAGER=True)
    settings = config.get_settings()
    assert settings.queues == ((30, "email"), (10, "default"))
    assert settings.concurrency == 3
    assert settings.eager is True


def test_lower_case_keys_are_accepted(settings):
    settings.EVENTMQ = {"concurrency": 7}
    assert conf.get_settings().concurrency == 7


def test_environment_wins_over_eventmq(eventmq_settings, emq_env):
    eventmq_settings(CONCURRENCY=3, BROKER_ADDR="tcp://127.0.0.1:5001")
    emq_env(CONCURRENCY="9")
    settings = config.get_settings()
    assert settings.concurrency == 9
    assert settings.broker_addr == "tcp://127.0.0.1:5001"


def test_override_settings_rebuilds_the_cached_settings():
    with override_settings(EVENTMQ={"CONCURRENCY": 2}):
        assert config.get_settings().concurrency == 2
        with override_settings(EVENTMQ={"CONCURRENCY": 5}):
            assert config.get_settings().concurrency == 5
        assert config.get_settings().concurrency == 2
    assert config.get_settings().concurrency == 4  # the default again


def test_other_settings_keep_the_cache():
    before = config.get_settings()
    with override_settings(DEBUG=True):
        assert config.get_settings() is before


def test_missing_eventmq_means_defaults(settings):
    del settings.EVENTMQ
    assert conf.raw_settings() == {}
    assert conf.get_settings().broker_addr == "tcp://127.0.0.1:47291"


def test_eventmq_that_is_not_a_dict_is_refused(settings):
    settings.EVENTMQ = ["BROKER_ADDR"]
    with pytest.raises(ConfigurationError, match="EVENTMQ must be a dict"):
        conf.get_settings()


def test_bad_value_is_a_configuration_error(eventmq_settings):
    with pytest.raises(ConfigurationError, match="CONCURRENCY"):
        eventmq_settings(CONCURRENCY=0)


def test_command_options_override_settings(eventmq_settings):
    eventmq_settings(CONCURRENCY=3, JOB_MODULES=["a.jobs"])
    settings = conf.settings_with_options(
        {"concurrency": 5, "job_modules": ["b.jobs"], "broker": None}
    )
    assert settings.concurrency == 5
    assert settings.job_modules == ("a.jobs", "b.jobs")
