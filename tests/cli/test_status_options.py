"""``--admin`` of ``manage.py emq_status`` and ``python -m django_eventmq status``: one router's
admin address or several ('a,b;c'), taken by both front ends from the one option row
(``cli/options.py``), and read from a real router plus addresses where nothing answers."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys

import pytest
from django.core.management import call_command, load_command_class
from django.core.management.base import CommandError

from django_eventmq.__main__ import build_parser
from django_eventmq.cli import options as cli_options
from django_eventmq.runtime import config
from tests.support import ROOT, clean_environ, free_port, python_module

A, B, C = (f"tcp://127.0.0.1:{port}" for port in (1001, 1002, 2001))


def python_m_status() -> argparse.ArgumentParser:
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = commands.choices["status"]
    return parser


def manage_py_status() -> argparse.ArgumentParser:
    return load_command_class("django_eventmq", "emq_status").create_parser(
        "manage.py", "emq_status"
    )


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("value", [A, f"{A},{B}", f"{A},{B};{C}", "tcp://*:47293"])
@pytest.mark.parametrize("parser", [python_m_status, manage_py_status], ids=["python-m", "manage"])
def test_both_front_ends_take_one_address_or_a_list(parser, value):
    assert parser().parse_args(["--admin", value]).admin == value


@pytest.mark.parametrize("parser", [python_m_status, manage_py_status], ids=["python-m", "manage"])
def test_the_help_names_the_list_form(parser):
    text = flat(parser().format_help())
    assert "or of several routers: 'a,b;c' (',' between the members of a router group" in text
    assert "';' between groups" in text


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (f"{A};", r"group 2 of .* is empty \(a stray ';'\?\)"),
        (f"{A};{A}", r"'tcp://127.0.0.1:1001' is in group 1 and in group 2"),
        (f"{A},nowhere", r"'nowhere' \(element 2 of .*\) is not a tcp:// address"),
        ("localhost:1", r"'localhost:1' is not a ZeroMQ address"),
    ],
    ids=["stray-semicolon", "in-two-groups", "malformed-member", "one-bad-address"],
)
def test_a_bad_value_is_refused_alike_by_both(value, message, capsys):
    with pytest.raises(argparse.ArgumentTypeError, match=message) as caught:
        cli_options.admin_addresses(value)
    said = str(caught.value)
    assert not said.startswith("ADMIN")  # argparse names the option itself
    with pytest.raises(SystemExit):
        python_m_status().parse_args(["--admin", value])
    assert f"argument --admin: {said}" in capsys.readouterr().err
    with pytest.raises(CommandError, match="argument --admin: ") as refused:
        manage_py_status().parse_args(["--admin", value])
    assert said in str(refused.value)


def rows(text: str) -> dict[str, list[str]]:
    """The router table's rows by address: [shard, group, address, role, ...]."""
    table = text.split("\n\n")[1].splitlines()
    assert table[0].split()[:4] == ["SHARD", "GROUP", "ADDRESS", "ROLE"], text
    return {line.split()[2]: line.split() for line in table[1:] if line[:1].isdigit()}


def run(args: list[str], *, django: bool) -> subprocess.CompletedProcess[str]:
    env = {**clean_environ(), "PYTHONPATH": str(ROOT)}
    if django:
        env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    return subprocess.run(
        args, capture_output=True, text=True, timeout=60, cwd=ROOT, env=env, check=False
    )


def test_python_m_status_reads_a_group_given_to_admin(router_admin):
    nowhere = f"tcp://127.0.0.1:{free_port()}"
    spec = f"{router_admin},{nowhere}"
    done = run(python_module("status", "--admin", spec, "--timeout", "0.3"), django=False)
    assert done.returncode == 0, done.stdout + done.stderr  # the shard's leader answered
    assert done.stdout.startswith(f"routers {spec} at ")
    table = rows(done.stdout)
    assert table[router_admin][:4] == ["1", "-", router_admin, "leader"]
    assert table[nowhere][:4] == ["1", "-", nowhere, "unreachable"]


def test_manage_py_emq_status_reads_groups_given_to_admin(router_admin):
    far, farther = (f"tcp://127.0.0.1:{free_port()}" for _ in range(2))
    spec = f"{router_admin},{far};{farther}"
    done = run(
        [
            sys.executable,
            str(ROOT / "manage.py"),
            "emq_status",
            "--admin",
            spec,
            "--timeout",
            "0.3",
        ],
        django=True,
    )
    assert done.returncode == 1  # shard 2 has no leader that answered
    table = rows(done.stdout)
    assert [table[a][:4] for a in (router_admin, far, farther)] == [
        ["1", "-", router_admin, "leader"],
        ["1", "-", far, "unreachable"],
        ["2", "-", farther, "unreachable"],
    ]
    assert "shard 2: no member answered" in done.stdout
    assert "a shard has no leader that answered" in done.stderr


def test_call_command_refuses_a_bad_list_its_keywords_bring(capsys):
    # call_command's keyword arguments skip the parser's check: run_options makes it.
    with pytest.raises(CommandError, match=r"^--admin: group 2 of .* is empty"):
        call_command("emq_status", admin=f"{A};", stdout=io.StringIO())


def test_emq_status_reads_the_routers_from_the_setting(router_admin, eventmq_settings):
    nowhere = f"tcp://127.0.0.1:{free_port()}"
    eventmq_settings(STATUS_ADMIN_ADDRS=f"{router_admin},{nowhere}")
    out = io.StringIO()
    call_command("emq_status", json=True, timeout=0.3, stdout=out)
    summary = json.loads(out.getvalue())
    assert [(r["address"], r["role"]) for r in summary["routers"]] == [
        (router_admin, "leader"),
        (nowhere, "unreachable"),
    ]
    # --admin wins over the setting.
    out = io.StringIO()
    call_command("emq_status", "--admin", router_admin, json=True, stdout=out)
    assert json.loads(out.getvalue())["router"] == router_admin


@pytest.mark.django_db
def test_emq_status_counts_the_dead_letters_of_the_results_table(router_admin):
    from django.utils import timezone

    from django_eventmq.models import DeadLetter

    out = io.StringIO()
    call_command("emq_status", "--admin", router_admin, stdout=out)
    assert "dead letters: 0 in the results table" in out.getvalue()
    for n, reason in enumerate(["failed", "failed", "timed_out"]):
        DeadLetter.objects.create(msgid=f"dead-{n}", reason=reason, created=timezone.now())
    out = io.StringIO()
    call_command("emq_status", "--admin", router_admin, stdout=out)
    assert "dead letters: 3 (2 failed, 1 timed out) in the results table" in out.getvalue()
    # --json stays one JSON document.
    out = io.StringIO()
    call_command("emq_status", "--admin", router_admin, json=True, stdout=out)
    assert json.loads(out.getvalue())["router"] == router_admin


def test_a_bad_setting_is_named_by_both_commands(settings):
    settings.EVENTMQ = {"STATUS_ADMIN_ADDRS": f"{A};"}
    config.reset()
    with pytest.raises(CommandError, match=r"^STATUS_ADMIN_ADDRS: group 2 of .* is empty"):
        call_command("emq_status", stdout=io.StringIO())
    done = subprocess.run(
        python_module("status"),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**clean_environ(), "PYTHONPATH": str(ROOT), "EMQ_STATUS_ADMIN_ADDRS": f"{A},x"},
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert "environment variable EMQ_STATUS_ADMIN_ADDRS: 'x' (element 2 of " in done.stderr
    assert "Traceback" not in done.stderr
