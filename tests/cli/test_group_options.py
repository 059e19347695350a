"""Router groups from the command line and the settings: --journal URL, --group,
--lease-seconds, DATABASES aliases, and what emq_status and the metrics show."""

from __future__ import annotations

import argparse

import pytest
from django.test import override_settings
from prometheus_client.core import Metric

from django_eventmq import conf
from django_eventmq.__main__ import main
from django_eventmq.cli import metrics, options, status
from django_eventmq.errors import ConfigurationError
from django_eventmq.router.process import router_service
from django_eventmq.runtime.settings import Settings, from_mapping

URL = "postgresql://eventmq@db.example:5432/jobs"


def _parse(*argv: str, base: Settings | None = None) -> Settings:
    parser = argparse.ArgumentParser()
    options.add_router_arguments(parser)
    return options.settings_from_options(base or Settings(), parser.parse_args(list(argv)))


def test_a_postgresql_journal_is_the_journal_url_not_a_file():
    s = _parse("--journal", URL, "--group", "eu_west", "--lease-seconds", "8")
    assert (s.journal_url, s.group, s.lease_seconds) == (URL, "eu_west", 8.0)
    assert s.journal_path == Settings().journal_path
    assert _parse("--journal", "postgres://h/db").journal_url == "postgres://h/db"
    assert _parse("--journal", "/tmp/j.sqlite3").journal_url == ""


def test_the_defaults_keep_the_sqlite_journal():
    s = Settings()
    assert (s.journal_url, s.group, s.lease_seconds) == ("", "default", 5.0)


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ({"JOURNAL_URL": "mysql://x/y"}, "JOURNAL_URL: expected a PostgreSQL URL"),
        ({"GROUP": "EU-West"}, "GROUP: 'EU-West' is not a group name"),
        ({"GROUP": "x" * 41}, "is not a group name"),
        ({"LEASE_SECONDS": 0}, "LEASE_SECONDS: expected a number > 0"),
        (
            {"JOURNAL_URL": URL, "LEASE_SECONDS": 3, "HEARTBEAT_INTERVAL": 3},
            "LEASE_SECONDS (3) must be longer than HEARTBEAT_INTERVAL (3)",
        ),
    ],
)
def test_bad_group_settings_say_how_to_fix_them(mapping, message):
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        from_mapping(mapping, environ={})


def test_a_lease_below_the_heartbeat_is_fine_without_a_group():
    assert from_mapping({"LEASE_SECONDS": 1}, environ={}).lease_seconds == 1


def test_a_lease_shorter_than_the_heartbeat_names_both_settings_on_the_command_line():
    with pytest.raises(options.OptionError, match="set LEASE_SECONDS to at least 6"):
        _parse("--journal", URL, "--lease-seconds", "2")


def test_the_environment_sets_a_group(monkeypatch):
    monkeypatch.setenv("EMQ_JOURNAL_URL", URL)
    monkeypatch.setenv("EMQ_GROUP", "blue")
    s = from_mapping()
    assert (s.journal_url, s.group) == (URL, "blue")


def test_journal_recover_is_refused_for_a_postgresql_journal(capsys):
    with pytest.raises(ConfigurationError, match="drop the option"):
        router_service(Settings(journal_url=URL), journal_recover=True)
    assert main(["router", "--journal", URL, "--journal-recover", "--log-level", "ERROR"]) == 1
    assert "nothing to salvage" in capsys.readouterr().err


def test_help_explains_the_group_options(capsys):
    with pytest.raises(SystemExit):
        main(["router", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for words in ("--group NAME", "--lease-seconds SECONDS", "postgresql://", "stand by"):
        assert words in text, words


# -- DATABASES aliases (manage.py) ----------------------------------------------------

PG = {
    "ENGINE": "django.db.backends.postgresql",
    "NAME": "jobs",
    "USER": "event mq",
    "PASSWORD": "s3:cr@t",
    "HOST": "db.example",
    "PORT": 5433,
    "OPTIONS": {"sslmode": "require"},
}


# Only conf reads DATABASES here (no connection is made): Django's warning does not apply.
NO_DB_WARNING = pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")


@NO_DB_WARNING
@override_settings(
    DATABASES={
        "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
        "pg": PG,
        "local": {**PG, "HOST": "/run/postgresql", "PASSWORD": "", "PORT": ""},
    }
)
def test_a_databases_alias_becomes_a_url():
    assert conf.database_url("pg") == (
        "postgresql://event%20mq:s3%3Acr%40t@db.example:5433/jobs?sslmode=require"
    )
    assert conf.database_url("local") == (
        "postgresql://event%20mq@/jobs?host=%2Frun%2Fpostgresql&sslmode=require"
    )
    s = conf.settings_with_options({"journal_path": "pg", "group": "g1"})
    assert (s.journal_url, s.group) == (conf.database_url("pg"), "g1")
    with pytest.raises(
        options.OptionError, match=r"DATABASES\['default'\] uses .*sqlite3, not Post"
    ):
        conf.settings_with_options({"journal_path": "default"})


@NO_DB_WARNING
@override_settings(DATABASES={"pg": PG}, EVENTMQ={"JOURNAL_URL": "pg"})
def test_journal_url_may_name_a_databases_alias():
    assert conf.get_settings().journal_url == conf.database_url("pg")


# -- emq_status and the metrics -----------------------------------------------------------

GROUP = {
    "group": "blue",
    "member": "web-1:41",
    "epoch": 3,
    "leader": "web-1:41",
    "leader_pid": 977,
    "leader_since": 1_700_000_000.0,
    "lease_expires": 1_700_000_005.0,
    "failovers": 2,
    "last_failover": 1_700_000_000.0,
    "last_failover_seconds": 0.42,
    "leadership_changes": 1,
}


def _snap(role: str) -> status.Snapshot:
    answer = {**GROUP, "role": role}
    if role == "standby":
        answer["member"] = "web-2:52"
    workers = {"connected_workers": {}, "connected_queues": {}, **answer}
    return status.Snapshot("tcp://127.0.0.1:1", 1.0, answer, workers, {"connected_schedulers": {}})


def test_status_says_role_leader_epoch_and_failovers():
    summary = status.summarize(_snap("leader"))
    assert summary["group"]["role"] == "leader"
    assert summary["group"]["failovers"] == 2
    text = status.render(summary)
    assert "group blue: this router (web-1:41) is the leader; leader web-1:41 (epoch 3)" in text
    assert "failovers: 2, last at " in text
    assert "(0.4s without a leader)" in text
    assert "no job managers connected" in text


def test_a_standby_shows_who_leads_and_nothing_else():
    text = status.render(status.summarize(_snap("standby")))
    assert "this router (web-2:52) is the standby; leader web-1:41 (epoch 3)" in text
    assert "standby: binds no frontend or backend" in text
    assert "no queues yet" not in text


def test_a_plain_router_has_no_group_part():
    assert "group" not in status.summarize(status.Snapshot("tcp://x:1", 1.0, {}, {}, {}))


def _values(families: list[Metric]) -> dict[str, float]:
    return {s.name: s.value for f in families for s in f.samples}


def test_metrics_of_a_leader_and_a_standby():
    leader = _values(metrics.router_families(_snap("leader")))
    assert leader["emq_router_leader"] == 1
    assert leader["emq_router_group_epoch"] == 3
    assert leader["emq_router_leadership_changes_total"] == 1
    assert leader["emq_router_group_failovers_total"] == 2
    assert leader["emq_router_last_failover_seconds"] == 0.42
    assert "emq_jobs_received_total" in leader or "emq_queue_depth" not in leader
    standby = _values(metrics.router_families(_snap("standby")))
    assert standby["emq_router_up"] == 1
    assert standby["emq_router_leader"] == 0
    assert not any(name.startswith("emq_jobs_") for name in standby)


@NO_DB_WARNING
@override_settings(
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}, "pg": PG},
)
def test_the_system_check_names_an_alias_that_is_not_postgresql():
    from django_eventmq.checks import check_settings

    with override_settings(EVENTMQ={"JOURNAL_URL": "default"}):
        errors = check_settings()
    assert [e.id for e in errors] == ["django_eventmq.E005"]
    assert "not PostgreSQL" in errors[0].msg
    with override_settings(EVENTMQ={"JOURNAL_URL": "pg", "GROUP": "g1"}):
        assert check_settings() == []


# -- peers name every member of a group ------------------------------------------------


def test_peers_take_a_list_of_router_addresses():
    pair = "tcp://10.0.0.1:47290,tcp://10.0.0.2:47290"
    s = from_mapping({"WORKER_ADDR": pair, "BROKER_ADDR": pair.replace("90", "91")}, environ={})
    assert (s.worker_addr, s.broker_addr) == (pair, pair.replace("90", "91"))
    with pytest.raises(ConfigurationError, match=r"WORKER_ADDR: element 2 .* is empty"):
        from_mapping({"WORKER_ADDR": "tcp://10.0.0.1:1,"}, environ={})
    parser = argparse.ArgumentParser()
    options.add_jobmanager_arguments(parser)
    assert (
        options.settings_from_options(Settings(), parser.parse_args(["-B", pair])).worker_addr
        == pair
    )


def test_a_bad_list_on_the_command_line_says_which_element(capsys):
    parser = argparse.ArgumentParser()
    options.add_scheduler_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--broker", "tcp://10.0.0.1:1,localhost"])
    assert "'localhost' (element 2" in capsys.readouterr().err


@NO_DB_WARNING
@override_settings(DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "x"}})
def test_emq_router_refuses_an_alias_that_is_not_postgresql():
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match=r"--journal: DATABASES\['default'\] uses"):
        call_command("emq_router", "--journal", "default")
