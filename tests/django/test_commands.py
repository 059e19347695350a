"""emq_router / emq_jobmanager and ``python -m django_eventmq``: help and bad options.

Running them for real is tests/system/e2e/examples's job; here they only parse.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

import pytest
from django.core.management import call_command, load_command_class
from django.core.management.base import CommandError

from tests.support import ROOT, Proc, python_module

ROUTER_OPTIONS = ("--frontend", "--backend", "--admin", "--log-level")
JOBMANAGER_OPTIONS = (
    "--broker",
    "--queues",
    "--concurrency",
    "--prefetch",
    "--max-jobs-per-child",
    "--job-module",
    "--allow-module",
    "--hooks",
    "--log-level",
)


def run(args, **env):
    """Run a command line from the repository root; returns the finished process."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        args, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=60, check=False
    )


def flat(text):
    return " ".join(text.split())


@pytest.mark.parametrize(
    ("name", "options"),
    [("emq_router", ROUTER_OPTIONS), ("emq_jobmanager", JOBMANAGER_OPTIONS)],
)
def test_management_command_help_lists_the_options(name, options):
    command = load_command_class("django_eventmq", name)
    text = flat(command.create_parser("manage.py", name).format_help())
    assert text.count("EventMQ") >= 1 and "SIGTERM" in text
    assert "settings.EVENTMQ" in text
    for option in options:
        assert option in text


def test_jobmanager_command_defaults_to_the_django_hooks():
    command = load_command_class("django_eventmq", "emq_jobmanager")
    parser = command.create_parser("manage.py", "emq_jobmanager")
    assert parser.parse_args([]).hooks == "django_eventmq.worker_hooks"
    assert "default: django_eventmq.worker_hooks" in flat(parser.format_help())


@pytest.mark.parametrize(
    ("subcommand", "options"),
    [("router", ROUTER_OPTIONS), ("jobmanager", JOBMANAGER_OPTIONS)],
)
def test_python_m_help_lists_the_options(subcommand, options):
    done = run(python_module(subcommand, "--help"))
    assert done.returncode == 0, done.stderr
    text = flat(done.stdout)
    assert text.startswith(f"usage: python -m django_eventmq {subcommand}")
    for option in options:
        assert option in text
    assert "EMQ_* environment variables" in text


def test_python_m_help_explains_the_subcommands():
    done = run(python_module("--help"))
    assert done.returncode == 0, done.stderr
    text = flat(done.stdout)
    assert "router run the router" in text
    assert "jobmanager run a job manager" in text


def test_python_m_does_not_import_django():
    code = (
        "import sys; from django_eventmq.__main__ import build_parser; build_parser(); "
        "print('django' in sys.modules)"
    )
    done = run([sys.executable, "-c", code])
    assert done.stdout.strip() == "False", done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["router", "--frontend", "localhost:1"], "argument --frontend: 'localhost:1' is not a"),
        (["jobmanager", "-Q", "email:x"], "argument --queues/-Q: weight of 'email'"),
        (
            ["jobmanager", "--queues", "email 30"],
            "argument --queues/-Q: 'email 30' holds a space: write queues as "
            "'name:weight,name:weight', e.g. 'email:30,default:10'\n",
        ),
        (["jobmanager", "-c", "0"], "argument --concurrency/-c: expected a whole number >= 1"),
        (["nonsense"], "invalid choice: 'nonsense'"),
    ],
)
def test_python_m_bad_option_is_a_clear_error(args, message):
    done = run(python_module(*args))
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"EMQ_CONCURRENCY": "zero"},
            "environment variable EMQ_CONCURRENCY: expected a whole number",
        ),
        (
            {"EMQ_QUEUES": "email 30"},
            "environment variable EMQ_QUEUES: 'email 30' holds a space: write queues as "
            "'name:weight,name:weight'",
        ),
    ],
)
def test_python_m_bad_environment_is_a_clear_error(env, message):
    done = run(python_module("jobmanager"), **env)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("queues", "message"),
    [
        ("email:x", "weight of 'email'"),
        ("email 30", "'email 30' holds a space: write queues as 'name:weight,name:weight'"),
    ],
)
def test_manage_py_bad_option_is_a_clear_error(queues, message):
    done = run(
        [sys.executable, "manage.py", "emq_jobmanager", "--queues", queues],
        DJANGO_SETTINGS_MODULE="example_project.settings",
    )
    assert done.returncode != 0
    assert "--queues" in done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "command",
    [
        python_module("jobmanager"),
        [sys.executable, "manage.py", "emq_jobmanager"],
    ],
)
def test_a_misspelt_job_module_is_refused_at_start(command):
    """As JOB_MODULES is by check E004: it started and held the jobs it took, never run."""
    done = run(
        [*command, "--broker", "tcp://127.0.0.1:1", "--job-module", "example_project.shop.jbos"],
        DJANGO_SETTINGS_MODULE="example_project.settings",
    )
    assert done.returncode == 1, done.stderr
    error = flat(done.stderr)
    assert "'example_project.shop.jbos' (no module named 'example_project.shop.jbos')" in error
    assert "cannot be imported (--job-module or JOB_MODULES): fix the name" in error
    assert "Traceback" not in done.stderr
    assert "jobmanager ready" not in done.stderr  # no worker process was started


def test_manage_py_bad_setting_fails_the_system_checks():
    done = run(
        [sys.executable, "manage.py", "emq_router"],
        DJANGO_SETTINGS_MODULE="example_project.settings",
        EMQ_FRONTEND_ADDR="localhost",
    )
    assert done.returncode != 0
    assert "django_eventmq.E003" in done.stderr
    assert "Traceback" not in done.stderr


def test_call_command_bad_value_raises_command_error():
    with pytest.raises(CommandError, match="--concurrency"):
        call_command("emq_jobmanager", "--concurrency", "0")
    with pytest.raises(CommandError, match=r"^--concurrency: expected a whole number > 0"):
        call_command("emq_jobmanager", concurrency=-1)


def test_python_m_router_and_jobmanager_run_and_stop_on_sigterm():
    any_port = "tcp://127.0.0.1:*"
    router = Proc(
        python_module("router", "--frontend", any_port, "--backend", any_port, "--admin", any_port)
    )
    jobmanager = None
    try:
        ready = router.wait_output(r"router ready: frontend=\S+ backend=(\S+) admin=\S+")
        jobmanager = Proc(
            python_module("jobmanager", "-B", ready.group(1), "-Q", "default:10", "-c", "1"),
            env={"EMQ_SHUTDOWN_GRACE": "1"},
        )
        jobmanager.wait_output(r"jobmanager ready: broker=\S+ queues=default:10 concurrency=1")
        assert re.search(
            r"\d\d:\d\d:\d\d,\d+ INFO django_eventmq\.router: router ready", router.output()
        )
        assert jobmanager.stop() == 0, jobmanager.output()
        assert router.stop() == 0, router.output()
        assert "Traceback" not in router.output() + jobmanager.output()
    finally:
        if jobmanager is not None:
            jobmanager.stop()
        router.stop()


# -- one option table: the same type says the same thing in every command ------

MANAGEMENT_COMMANDS = (
    "emq_router",
    "emq_jobmanager",
    "emq_scheduler",
    "emq_pubsub",
    "emq_subscribe",
    "emq_status",
    "emq_keys",
    "emq_purge_results",
)


def management_parser(name):
    return load_command_class("django_eventmq", name).create_parser("manage.py", name)


def python_m_parsers():
    """``python -m django_eventmq``'s subcommand parsers by name."""
    from django_eventmq.__main__ import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(commands.choices)


#: (flag, bad value): every command having the flag refuses the value with the same words.
SHARED_REFUSALS = {
    ("localhost:1", "address"): [
        ("emq_router", "--frontend"),
        ("emq_router", "--backend"),
        ("emq_router", "--admin"),
        ("emq_jobmanager", "--broker"),
        ("emq_scheduler", "--broker"),
        ("emq_pubsub", "--incoming"),
        ("emq_pubsub", "--outgoing"),
        ("emq_subscribe", "--connect"),
        ("emq_status", "--admin"),
    ],
    ("0", "seconds > 0"): [
        ("emq_scheduler", "--poll-interval"),
        ("emq_status", "--interval"),
        ("emq_status", "--timeout"),
    ],
    ("-1", "seconds > 0"): [
        ("emq_scheduler", "--poll-interval"),
        ("emq_status", "--interval"),
        ("emq_status", "--timeout"),
    ],
    ("0", "whole number >= 1"): [
        ("emq_jobmanager", "--concurrency"),
        ("emq_router", "--high-water-mark"),
        ("emq_pubsub", "--hwm"),
    ],
    ("loud", "log level"): [
        (name, "--log-level")
        for name in ("emq_router", "emq_jobmanager", "emq_scheduler", "emq_pubsub", "emq_subscribe")
    ],
    ("not a module", "module"): [
        ("emq_jobmanager", "--job-module"),
        ("emq_jobmanager", "--hooks"),
        ("emq_subscribe", "--subscriber-module"),
    ],
}


def django_error(parser, flag, value):
    # Django's parser raises CommandError("Error: argument --x: ...") outside a terminal.
    with pytest.raises(CommandError) as caught:
        parser.parse_args([flag, value])
    text = str(caught.value)
    assert f"{flag}" in text, text
    return text.split(": ", 2)[-1]


@pytest.mark.parametrize(("case", "users"), list(SHARED_REFUSALS.items()), ids=str)
def test_the_same_bad_value_is_refused_with_the_same_words_everywhere(case, users):
    value, _kind = case
    said = {
        (name, flag): django_error(management_parser(name), flag, value) for name, flag in users
    }
    assert len(set(said.values())) == 1, said
    assert repr(value) in next(iter(said.values()))


@pytest.mark.parametrize(
    ("subcommand", "flag", "value", "command"),
    [
        ("router", "--frontend", "localhost:1", "emq_router"),
        ("jobmanager", "--prefetch-budget", "-1", "emq_jobmanager"),
        ("pubsub", "--hwm", "0", "emq_pubsub"),
        ("subscribe", "--connect", "nowhere", "emq_subscribe"),
        ("status", "--interval", "0", "emq_status"),
    ],
)
def test_python_m_and_manage_py_refuse_a_bad_value_alike(subcommand, flag, value, command, capsys):
    parser = python_m_parsers()[subcommand]
    with pytest.raises(SystemExit):
        parser.parse_args([flag, value])
    err = capsys.readouterr().err
    assert django_error(management_parser(command), flag, value) in err


def all_parsers():
    for name in MANAGEMENT_COMMANDS:
        yield f"manage.py {name}", management_parser(name)
    for name, parser in python_m_parsers().items():
        yield f"python -m django_eventmq {name}", parser


def test_every_option_of_every_command_has_help():
    seen = 0
    for where, parser in all_parsers():
        for action in parser._actions:
            if not action.option_strings:
                continue
            seen += 1
            assert action.help and action.help.strip() and action.help != argparse.SUPPRESS, (
                where,
                action.option_strings,
            )
    assert seen > 60


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("emq_scheduler", ("--broker", "--catchup", "--poll-interval", "--log-level")),
        ("emq_pubsub", ("--incoming", "--outgoing", "--hwm", "--log-level")),
        ("emq_subscribe", ("--connect", "--subscriber-module", "--log-level")),
        ("emq_status", ("--admin", "--json", "--watch", "--interval", "--monitor", "--timeout")),
        ("emq_router", ("--journal", "--no-journal", "--journal-sync", "--metrics")),
    ],
)
def test_every_command_explains_its_options_with_their_defaults(name, options):
    text = flat(management_parser(name).format_help())
    for option in options:
        assert option in text, option
    if name == "emq_scheduler":
        assert "the SCHEDULER_POLL_INTERVAL setting or EMQ_SCHEDULER_POLL_INTERVAL, else 1)" in text
        assert "the BROKER_ADDR setting or EMQ_BROKER_ADDR, else tcp://127.0.0.1:47291" in text


def test_scheduler_options_become_settings():
    from django_eventmq.cli import options as cli_options
    from django_eventmq.runtime.settings import Settings

    parser = management_parser("emq_scheduler")
    options = parser.parse_args(
        ["--broker", "tcp://127.0.0.1:6100", "--catchup", "all", "--poll-interval", "0.5"]
    )
    settings = cli_options.settings_from_options(Settings(), options)
    assert settings.broker_addr == "tcp://127.0.0.1:6100"
    assert (settings.scheduler_catchup, settings.scheduler_poll_interval) == ("all", 0.5)


def test_emq_subscribe_reports_a_start_error_as_a_command_error(settings):
    # The consumer's socket is made in run(): a CURVE setting that cannot work
    # (the publisher's key given, this process's own key pair missing) must be
    # a CommandError saying what to fix, as from emq_pubsub, not a traceback.
    from django_eventmq.pubsub.api import remove_subscriber, subscriber

    def handler(topic, data):
        raise AssertionError("no event is received")

    settings.EVENTMQ = {
        "CURVE_SERVER_PUBLIC_KEY": "8fd-l*>s$iy#k$>:Mr%&>j:nICGWAztBYcTyytRz",
        "SUBSCRIBE_ADDR": "tcp://127.0.0.1:9",
    }
    subscriber("review.")(handler)
    try:
        with pytest.raises(CommandError, match="CURVE_CLIENT_SECRET_KEY is not"):
            call_command("emq_subscribe")
    finally:
        remove_subscriber(handler)


@pytest.mark.django_db
def test_emq_scheduler_reports_a_start_error_as_a_command_error(settings):
    # A CURVE setting that cannot work (this process's own key pair missing) is a
    # CommandError saying what to fix, as from the other process commands.
    settings.EVENTMQ = {
        "CURVE_SERVER_PUBLIC_KEY": "8fd-l*>s$iy#k$>:Mr%&>j:nICGWAztBYcTyytRz",
        "BROKER_ADDR": "tcp://127.0.0.1:9",
    }
    with pytest.raises(CommandError, match="CURVE_CLIENT_SECRET_KEY is not"):
        call_command("emq_scheduler")


def test_emq_scheduler_on_a_database_never_migrated_says_to_migrate(tmp_path):
    done = run(
        [sys.executable, "manage.py", "emq_scheduler", "--broker", "tcp://127.0.0.1:1"],
        DJANGO_SETTINGS_MODULE="tests.system.ops.sqlite_settings",
        EMQ_TEST_SQLITE=str(tmp_path / "empty.sqlite3"),
    )
    assert done.returncode != 0
    assert "run 'manage.py migrate' for this database first" in done.stderr
    assert "Traceback" not in done.stderr
