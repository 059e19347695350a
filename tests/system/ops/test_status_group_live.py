"""``emq_status`` reading both routers of a real group on PostgreSQL: who leads, who stands by,
and who leads after the leader is stopped; a second shard that does not answer is a row."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys

import pytest
from django.core.management import CommandError, call_command

from tests.pg_support import pg_dsn, pg_group  # noqa: F401 - fixtures
from tests.support import ROOT, clean_environ, free_port, python_module, wait_for
from tests.system.ha_group.support import Group

# A group whose lease (120 s) outlasts the test: after SIGTERM B leads because A released it.
from tests.system.ha_group.test_group_edges import group  # noqa: F401 - fixture

pytestmark = pytest.mark.postgres


def manage_status(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "emq_status", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={
            **clean_environ(),
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "PYTHONPATH": str(ROOT),
            **(env or {}),
        },
        check=False,
    )


def rows(text: str) -> dict[str, list[str]]:
    """The router table's rows by address: [shard, group, address, role, epoch, ...]."""
    table = text.split("\n\n")[1].splitlines()
    assert table[0].split()[:4] == ["SHARD", "GROUP", "ADDRESS", "ROLE"], text
    return {line.split()[2]: line.split() for line in table[1:] if line[:1].isdigit()}


def test_the_table_names_the_leader_then_the_new_leader_after_sigterm(group: Group) -> None:  # noqa: F811
    members = f"{group.a.admin},{group.b.admin}"
    done = manage_status("--admin", members)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"routers {members} at ")
    table = rows(done.stdout)
    assert table[group.a.admin][:5] == ["1", group.group, group.a.admin, "leader", "1"]
    assert table[group.b.admin][:5] == ["1", group.group, group.b.admin, "standby", "1"]
    assert "SHARD  QUEUE" in done.stdout or "no queues yet" in done.stdout
    assert "total across 1 of 1 shard(s): 0 waiting" in done.stdout

    assert group.a.proc.stop() == 0  # SIGTERM: A releases the lease
    wait_for(lambda: group.b.role() == "leader", 30, "B to lead after A's SIGTERM")

    done = manage_status("--admin", members, "--timeout", "0.5")
    assert done.returncode == 0, done.stdout + done.stderr  # the shard has a leader
    table = rows(done.stdout)
    assert table[group.a.admin][3] == "unreachable"
    assert table[group.b.admin][3:5] == ["leader", "2"]
    assert f"{group.a.admin}: router unreachable: no answer to STATUS" in done.stdout

    # --json carries the same, here read from EMQ_STATUS_ADMIN_ADDRS by python -m.
    out = subprocess.run(
        python_module("status", "--json", "--timeout", "0.5"),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**clean_environ(), "EMQ_STATUS_ADMIN_ADDRS": members, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads(out.stdout)
    assert [(r["address"], r["role"]) for r in summary["routers"]] == [
        (group.a.admin, "unreachable"),
        (group.b.admin, "leader"),
    ]
    (shard,) = summary["shards"]
    assert shard["leader"] == group.b.admin
    assert shard["group"] == group.group
    assert summary["routers"][1]["failovers"] >= 0


def test_a_shard_that_does_not_answer_is_a_row_and_exit_1(group: Group) -> None:  # noqa: F811
    nowhere = f"tcp://127.0.0.1:{free_port()}"
    spec = f"{group.a.admin},{group.b.admin};{nowhere}"
    done = manage_status("--admin", spec, "--timeout", "0.3")
    assert done.returncode == 1
    table = rows(done.stdout)
    assert [table[a][3] for a in (group.a.admin, group.b.admin, nowhere)] == [
        "leader",
        "standby",
        "unreachable",
    ]
    assert table[nowhere][0] == "2"
    assert "shard 2: no member answered" in done.stdout
    assert "a shard has no leader that answered" in done.stderr

    out = io.StringIO()
    with pytest.raises(CommandError, match="a shard has no leader that answered"):
        call_command("emq_status", admin=spec, json=True, timeout=0.3, stdout=out)
    summary = json.loads(out.getvalue())
    assert [s["leader"] for s in summary["shards"]] == [group.a.admin, None]


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (("--admin", "tcp://127.0.0.1:1;"), {}, "--admin: group 2 of .* is empty"),
        ((), {"EMQ_STATUS_ADMIN_ADDRS": "tcp://127.0.0.1:1,x"}, "STATUS_ADMIN_ADDRS: 'x'"),
    ],
    ids=["option", "environment"],
)
def test_a_bad_list_is_a_clear_error(args, env, message) -> None:
    done = manage_status(*args, env=env)
    assert done.returncode != 0
    assert done.stdout == ""
    assert re.search(message, done.stderr), done.stderr
    assert "Traceback" not in done.stderr
