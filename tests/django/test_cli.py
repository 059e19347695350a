"""django_eventmq.cli.options: the options both front ends share, turned into settings."""

from __future__ import annotations

import argparse
import dataclasses
import logging

import pytest

from django_eventmq.cli import options as cli_options
from django_eventmq.runtime.settings import Settings


def parse(add, *argv):
    parser = argparse.ArgumentParser(prog="test", exit_on_error=False)
    add(parser)
    return parser.parse_args(list(argv))


def test_router_options_become_settings():
    options = parse(
        cli_options.add_router_arguments,
        "--frontend=tcp://127.0.0.1:6001",
        "--backend=tcp://127.0.0.1:6002",
        "--admin=ipc:///tmp/emq-admin.sock",
        "--log-level=debug",
    )
    settings = cli_options.settings_from_options(Settings(), options)
    assert settings.frontend_addr == "tcp://127.0.0.1:6001"
    assert settings.backend_addr == "tcp://127.0.0.1:6002"
    assert settings.admin_addr == "ipc:///tmp/emq-admin.sock"
    assert options.log_level == "DEBUG"


def test_jobmanager_options_become_settings():
    options = parse(
        cli_options.add_jobmanager_arguments,
        "-B",
        "tcp://127.0.0.1:6002",
        "-Q",
        "email:30,default:10",
        "-c",
        "3",
        "--prefetch=2",
        "--max-jobs-per-child=100",
        "--job-module=shop.jobs",
        "--job-module=billing.jobs",
        "--allow-module=legacy.tasks",
        "--hooks=myproject.hooks",
    )
    base = Settings(job_modules=("core.jobs",))
    settings = cli_options.settings_from_options(base, options)
    assert settings.worker_addr == "tcp://127.0.0.1:6002"
    assert settings.queues == ((30, "email"), (10, "default"))
    assert (settings.concurrency, settings.prefetch, settings.max_jobs_per_child) == (3, 2, 100)
    assert settings.job_modules == ("core.jobs", "shop.jobs", "billing.jobs")
    assert settings.allowed_job_modules == ("legacy.tasks",)
    assert options.hooks == "myproject.hooks"


def test_options_not_given_leave_settings_alone():
    base = Settings(concurrency=7, queues=((5, "x"),))
    options = parse(cli_options.add_jobmanager_arguments)
    assert cli_options.settings_from_options(base, options) == base
    assert options.hooks is None
    assert options.log_level == "INFO"


def test_hooks_default_is_configurable():
    parser = argparse.ArgumentParser()
    cli_options.add_jobmanager_arguments(parser, hooks_default="pkg.hooks")
    assert parser.parse_args([]).hooks == "pkg.hooks"
    assert "default: pkg.hooks" in parser.format_help()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--concurrency=0"], r"--concurrency.*whole number >= 1, got '0'"),
        (["-c", "many"], r"--concurrency.*whole number >= 1, got 'many'"),
        (["--prefetch=-1"], r"--prefetch.*whole number >= 0"),
        (["--queues=email:x"], r"--queues.*weight of 'email'.*email:30,default:10"),
        (["--queues=,"], r"--queues.*QUEUES is empty"),
        (["--queues=bad!"], r"--queues.*may only hold"),
        (["--queues=email 30"], r"--queues.*: 'email 30' holds a space: write queues as 'name:w"),
        (["-Q", "email,30"], r"--queues.*: '30' is a number, not a queue name: write queues"),
        (["--broker=localhost:1"], r"--broker.*not a ZeroMQ address.*tcp://127.0.0.1"),
        (["--job-module=not a module"], r"--job-module.*dotted module path"),
        (["--log-level=loud"], r"--log-level.*unknown log level 'loud'"),
    ],
)
def test_bad_values_name_the_option_and_a_fix(argv, message):
    with pytest.raises(argparse.ArgumentError, match=message):
        parse(cli_options.add_jobmanager_arguments, *argv)


def test_settings_from_options_names_the_option_of_a_bad_value():
    # Values reach settings_from_options unparsed when a caller builds the
    # options itself (call_command with keyword arguments).
    with pytest.raises(
        cli_options.OptionError, match=r"^--concurrency: expected a whole number > 0"
    ):
        cli_options.settings_from_options(Settings(), {"concurrency": -2})
    with pytest.raises(cli_options.OptionError, match=r"^--frontend: .*not a ZeroMQ address"):
        cli_options.settings_from_options(Settings(), {"frontend": "nowhere"})


def test_help_shows_every_option_with_its_default():
    parser = argparse.ArgumentParser()
    cli_options.add_jobmanager_arguments(parser)
    text = " ".join(parser.format_help().split())
    for option in (
        "--broker",
        "--queues",
        "--concurrency",
        "--prefetch",
        "--max-jobs-per-child",
        "--job-module",
        "--allow-module",
        "--hooks",
        "--log-level",
    ):
        assert option in text
    assert "else tcp://127.0.0.1:47290" in text
    assert "else default:10" in text
    assert "EMQ_CONCURRENCY, else 4" in text


@pytest.fixture
def restore_logger():
    logger = logging.getLogger("django_eventmq")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield logger
    logger.handlers[:] = saved[0]
    logger.setLevel(saved[1])
    logger.propagate = saved[2]


def test_configure_logging_installs_one_stderr_handler(restore_logger, capsys):
    cli_options.configure_logging("info")
    cli_options.configure_logging("warning")
    logger = cli_options.configure_logging("info")
    assert logger is restore_logger
    assert [type(h).__name__ for h in logger.handlers].count("_StderrHandler") == 1
    logging.getLogger("django_eventmq.router").info("router ready: frontend=x")
    logging.getLogger("django_eventmq.router").debug("not shown at INFO")
    err = capsys.readouterr().err
    assert err.count("router ready") == 1
    assert " INFO django_eventmq.router: router ready: frontend=x" in err
    assert "not shown" not in err


def test_every_setting_backed_option_names_a_setting_and_shows_its_default():
    fields = {field.name for field in dataclasses.fields(Settings)}
    keys: dict[str, str] = {}
    for option in cli_options._SETTING_OPTIONS:
        assert option.setting in fields, option.name
        # One argparse dest never stands for two settings.
        assert keys.setdefault(option.key, option.setting) == option.setting, option.name
        assert option.help.strip() and "(default: the " in option.full_help(), option.name


def test_publisher_subscriber_and_journal_options_become_settings():
    options = {
        "incoming": "tcp://127.0.0.1:6201",
        "outgoing": "tcp://127.0.0.1:6202",
        "subscribe": "tcp://127.0.0.1:6203",
        "journal_path": "/tmp/emq-j.sqlite3",
    }
    settings = cli_options.settings_from_options(Settings(journal=False), options)
    assert settings.publisher_incoming_addr == "tcp://127.0.0.1:6201"
    assert settings.publisher_outgoing_addr == "tcp://127.0.0.1:6202"
    assert settings.subscribe_addr == "tcp://127.0.0.1:6203"
    assert (settings.journal, settings.journal_path) == (True, "/tmp/emq-j.sqlite3")
    with pytest.raises(cli_options.OptionError, match=r"^--incoming: .*not a ZeroMQ address"):
        cli_options.settings_from_options(Settings(), {"incoming": "nowhere"})


@pytest.mark.parametrize(
    ("parse", "good", "bad", "message"),
    [
        (cli_options.seconds(0), "0", "-1", "expected a number of seconds >= 0, got '-1'"),
        (
            cli_options.seconds(0, inclusive=False),
            "0.5",
            "0",
            "expected a number of seconds > 0, got '0'",
        ),
        (cli_options.seconds(0), "1", "inf", "expected a number of seconds >= 0, got 'inf'"),
        (cli_options.seconds(0), "1", "soon", "expected a number of seconds >= 0, got 'soon'"),
        (cli_options.whole(1), "1", "0", "expected a whole number >= 1, got '0'"),
        (cli_options.whole(0), "0", "1.5", "expected a whole number >= 0, got '1.5'"),
    ],
)
def test_argument_types_accept_the_bound_and_refuse_past_it(parse, good, bad, message):
    assert parse(good) == float(good)
    with pytest.raises(argparse.ArgumentTypeError, match=f"^{message}$"):
        parse(bad)
