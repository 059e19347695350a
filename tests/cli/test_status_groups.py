"""emq_status over several routers (router groups and shards), from admin answers given as data.

Shard 1 is a group of two members (a leader and a standby), shard 2 a group whose
first member does not answer and whose second leads. No sockets: ``ask`` is a table.
"""

from __future__ import annotations

import argparse
import io
import json
import time
from collections.abc import Iterator

import pytest

from django_eventmq.cli import options as cli_options
from django_eventmq.cli import status_command, status_groups
from django_eventmq.cli.status import Snapshot
from django_eventmq.errors import BrokerUnavailable, ConfigurationError
from django_eventmq.runtime import admin_client
from django_eventmq.runtime.settings import Settings
from tests.cli.test_group_options import GROUP

A1, B1, A2, B2 = (f"tcp://127.0.0.1:{port}" for port in (1001, 1002, 2001, 2002))
LIST = f"{A1},{B1};{A2},{B2}"

#: A lease row as STATUS reports it (group blue, epoch 3, two failovers).
LEASE_1 = {key: value for key, value in GROUP.items() if key not in ("member", "role")}
LEASE_2 = {
    **LEASE_1,
    "group": "green",
    "epoch": 1,
    "leader": "web-4:7",
    "failovers": 0,
    "last_failover": None,
    "last_failover_seconds": None,
}


def leader_status(lease: dict[str, object], member: str, waiting: dict[str, int]) -> dict:
    return {
        **lease,
        "role": "leader",
        "member": member,
        "waiting_messages_by_queue": waiting,
        "inflight_messages_by_queue": {"email": 1},
        "processed_messages_by_queue": {q: 10 for q in waiting},
        "waiting_since_by_queue": {q: 5_000 for q, n in waiting.items() if n},
        "failed_messages_by_queue": {"email": 1},
        "requeued_messages": 1,
    }


ANSWERS: dict[str, dict[str, dict]] = {
    A1: {
        "STATUS": leader_status(LEASE_1, "web-1:41", {"email": 3, "default": 0}),
        "ROUTER_SHOW_WORKERS": {
            "connected_workers": {
                "jm-1": {"hb": 99.5, "available_slots": 2, "queues": [[10, "email"]], "inflight": 1}
            },
            "connected_queues": {"email": [[10, "jm-1"]]},
            "now": 100.0,
        },
        "ROUTER_SHOW_SCHEDULERS": {"connected_schedulers": {}},
    },
    B1: {
        command: {**LEASE_1, "role": "standby", "member": "web-2:52"}
        for command in ("STATUS", "ROUTER_SHOW_WORKERS", "ROUTER_SHOW_SCHEDULERS")
    },
    B2: {
        "STATUS": leader_status(LEASE_2, "web-4:7", {"email": 4}),
        "ROUTER_SHOW_WORKERS": {"connected_workers": {}, "connected_queues": {}},
        "ROUTER_SHOW_SCHEDULERS": {"connected_schedulers": {}},
    },
}


def ask(addr: str, command: str, timeout: float) -> dict:
    if addr not in ANSWERS:
        raise BrokerUnavailable(f"no answer to {command} from {addr} within {timeout}s")
    return ANSWERS[addr][command]


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Times as UTC, so the tables are the same on every machine."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def groups(spec: str = LIST) -> list[list[Snapshot]]:
    parsed = status_groups.admin_groups(spec, "--admin")
    assert parsed is not None
    return status_groups.fetch_groups(parsed, timeout=0.1, ask=ask)


def test_a_list_is_parsed_into_shards_of_members():
    assert admin_client.parse_admin_groups(LIST, "X") == ((A1, B1), (A2, B2))
    assert status_groups.admin_groups("tcp://*:1,tcp://*:2", "X") == (
        ("tcp://127.0.0.1:1", "tcp://127.0.0.1:2"),
    )
    assert status_groups.admin_groups("tcp://*:1", "X") is None  # one address: read as always


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (f"{A1};", "X: group 2 of .* is empty \\(a stray ';'\\?\\)"),
        (f"{A1};{A1}", "X: 'tcp://127.0.0.1:1001' is in group 1 and in group 2"),
        (f"{A1},{A1}", "X: 'tcp://127.0.0.1:1001' is listed twice"),
        (f"{A1},nowhere", "X: 'nowhere' .* is not a tcp:// address"),
    ],
    ids=["stray-semicolon", "in-two-groups", "twice-in-a-group", "malformed"],
)
def test_a_bad_list_says_what_is_wrong(value, message):
    with pytest.raises(ConfigurationError, match=message):
        admin_client.parse_admin_groups(value, "X")
    with pytest.raises(argparse.ArgumentTypeError, match=message.removeprefix("X: ")):
        cli_options.admin_addresses(value)


def test_the_option_takes_one_address_as_before():
    assert cli_options.admin_addresses("tcp://*:47293") == "tcp://*:47293"
    with pytest.raises(argparse.ArgumentTypeError, match="is not a ZeroMQ address"):
        cli_options.admin_addresses("localhost")


def test_which_routers_to_read():
    settings = Settings(status_admin_addrs=LIST)
    assert status_command.admin_targets("tcp://x:1", "tcp://d:3", settings) == "tcp://x:1"
    assert status_command.admin_targets(None, "tcp://d:3", settings) == LIST
    assert status_command.admin_targets(None, "tcp://d:3", Settings()) == "tcp://d:3"


def test_summary_rows_of_leader_standby_and_unreachable():
    summary = status_groups.summarize_groups(groups())
    roles = [(r["shard"], r["address"], r["role"], r["epoch"]) for r in summary["routers"]]
    assert roles == [
        (1, A1, "leader", 3),
        (1, B1, "standby", 3),
        (2, A2, "unreachable", None),
        (2, B2, "leader", 1),
    ]
    unreachable = summary["routers"][2]
    assert unreachable["error"].startswith("router unreachable: no answer to STATUS from")
    assert [(s["shard"], s["group"], s["leader"]) for s in summary["shards"]] == [
        (1, "blue", A1),
        (2, "green", B2),
    ]
    assert summary["reachable"] is True  # every shard has a leader that answered
    depths = {
        s["shard"]: {q["queue"]: q["waiting"] for q in s["summary"]["queues"]}
        for s in summary["shards"]
    }
    assert depths == {1: {"default": 0, "email": 3}, 2: {"email": 4}}
    assert {q["queue"]: q["waiting"] for q in summary["queues"]} == {"default": 0, "email": 7}
    assert summary["totals"]["waiting"] == 7
    assert summary["totals"]["in_flight"] == 2
    assert summary["totals"]["processed"] == 30
    assert summary["totals"]["failed"] == 2
    assert [(m["name"], m["shard"]) for m in summary["job_managers"]] == [("jm-1", 1)]
    json.dumps(summary)  # --json carries it as is


#: Shard 1: leader and standby of group blue; shard 2: an unreachable member, then the leader.
SNAPSHOT = """\
routers

SHARD  GROUP  ADDRESS               ROLE         EPOCH         LEADER SINCE  FAILOVERS        LAST FAILOVER  WITHOUT LEADER
1      blue   tcp://127.0.0.1:1001  leader           3  2023-11-14 22:13:20          2  2023-11-14 22:13:20           420ms
1      blue   tcp://127.0.0.1:1002  standby          3  2023-11-14 22:13:20          2  2023-11-14 22:13:20           420ms
2      -      tcp://127.0.0.1:2001  unreachable      -                    -          -                    -               -
2      green  tcp://127.0.0.1:2002  leader           1  2023-11-14 22:13:20          0                    -               -
tcp://127.0.0.1:2001: router unreachable: no answer to STATUS from tcp://127.0.0.1:2001 within 0.1s

SHARD  QUEUE    WAITING  IN FLIGHT  WAITING SINCE  PROCESSED  JOBS/S
1      default        0          0              -         10       -
1      email          3          1           5.0s         10       -
2      email          4          1           5.0s         10       -
all    default        0          0              -         10       -
all    email          7          2           5.0s         20       -

JOB MANAGER  SHARD  QUEUES (WEIGHT)  FREE SLOTS  IN FLIGHT  LAST HEARTBEAT
jm-1             1         email:10           2          1       500ms ago

total across 2 of 2 shard(s): 7 waiting, 2 in flight, 30 processed (- jobs/s), 2 failed, 0 retried, 2 requeued, 0 poisoned
"""  # noqa: E501


def test_the_text_snapshot():
    text = status_groups.render_groups(status_groups.summarize_groups(groups()), title="routers")
    assert text == SNAPSHOT


def test_a_shard_without_a_leader_is_a_row_and_a_line_not_an_error():
    # Shard 2 is only its unreachable member; shard 1 only its standby.
    summary = status_groups.summarize_groups(groups(f"{B1};{A2}"))
    assert [r["role"] for r in summary["routers"]] == ["standby", "unreachable"]
    assert summary["reachable"] is False
    assert summary["error"] == (
        "shard 1: no member leads (standby only); shard 2: no member answered"
    )
    text = status_groups.render_groups(summary)
    assert "shard 1: no member leads (standby only)\nshard 2: no member answered\n" in text
    assert "no queues yet" in text
    assert text.endswith("total across 0 of 2 shard(s): 0 waiting, 0 in flight, 0 processed "
                         "(- jobs/s), 0 failed, 0 retried, 0 requeued, 0 poisoned\n")  # fmt: skip


def test_the_highest_epoch_leads_when_two_members_say_they_lead():
    old = {**ANSWERS[A1], "STATUS": {**ANSWERS[A1]["STATUS"], "epoch": 2}}
    new = ANSWERS[A1]
    snaps = [
        [
            Snapshot(A1, 1.0, old["STATUS"], old["ROUTER_SHOW_WORKERS"]),
            Snapshot(B1, 1.0, new["STATUS"], new["ROUTER_SHOW_WORKERS"]),
        ]
    ]
    assert status_groups.summarize_groups(snaps)["shards"][0]["leader"] == B1


def test_throughput_per_leader_and_across():
    first = groups()
    previous = {s.admin_addr: s for members in first for s in members if not s.error}
    later = [
        [
            Snapshot(
                s.admin_addr,
                s.taken_at + 2.0,
                {**s.status, "processed_messages_by_queue": {"email": 14}},
                s.workers,
                s.schedulers,
            )
            if not s.error
            else s
            for s in members
        ]
        for members in first
    ]
    summary = status_groups.summarize_groups(later, previous)
    assert summary["totals"]["jobs_per_s"] == 4.0  # 2/s on each shard's leader
    email = next(q for q in summary["queues"] if q["queue"] == "email")
    assert email["jobs_per_s"] == 4.0


def test_run_prints_the_table_and_exits_by_leaders(capsys):
    out = io.StringIO()
    assert status_command.run(LIST, out, ask=ask) == 0
    assert out.getvalue().startswith(f"routers {LIST} at ")
    out = io.StringIO()
    assert status_command.run(f"{A1};{A2}", out, ask=ask, as_json=True) == 1  # shard 2: no leader
    data = json.loads(out.getvalue())
    assert [r["role"] for r in data["routers"]] == ["leader", "unreachable"]
    assert data["shards"][1]["summary"] is None


def test_run_options_reads_the_list_from_the_settings():
    out = io.StringIO()
    settings = Settings(status_admin_addrs=f"{A1};{A2}")
    code = status_command.run_options({"json": True, "timeout": 0.1}, A1, out, settings=settings)
    assert code == 1  # the addresses are nothing: no shard has a leader that answered
    assert [r["address"] for r in json.loads(out.getvalue())["routers"]] == [A1, A2]


def test_run_options_refuses_a_bad_list_that_skipped_the_parser():
    out, err = io.StringIO(), io.StringIO()
    assert (
        status_command.run_options({"admin": f"{A1};"}, A1, out, settings=Settings(), err=err) == 2
    )
    assert err.getvalue().startswith("emq_status: --admin: group 2 of ")
    assert out.getvalue() == ""
