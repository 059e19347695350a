"""The status summary and tables, from admin answers given as data (no sockets)."""

from __future__ import annotations

import json

import pytest

from django_eventmq.cli import status, status_command
from django_eventmq.cli.status import Snapshot
from django_eventmq.errors import BrokerUnavailable

STATUS = {
    "inflight_messages_by_queue": {"email": 2},
    "latency_messages_by_queue": {"email": 1500},
    "max_latency_messages_by_queue": {"email": 2500},
    "waiting_messages_by_queue": {"email": 3, "default": 0},
    "processed_messages_by_queue": {"email": 40, "default": 5},
    "processed_messages_by_worker": {"jm-1": 45},
    "waiting_since_by_queue": {"email": 65_000},
    "requeued_messages": 2,
    "poisoned_messages": [{"msgid": "m1", "queue": "email"}],
    # The router's counters (extras of ours, from django_eventmq/runtime/stats.py).
    "received_messages_by_queue": {"email": 46, "default": 5},
    "dispatched_messages_by_queue": {"email": 44, "default": 5},
    "finished_messages_by_queue": {"email": {"ok": 38, "failed": 2}, "default": {"ok": 5}},
    "failed_messages_by_queue": {"email": 2},
    "retried_messages_by_queue": {"email": 1},
    "heartbeats_missed": 1,
    "duration_buckets": [0.1, 1.0],
    "duration_seconds_by_queue": {"email": {"counts": [30, 9, 1], "sum": 12.5}},
}
WORKERS = {
    "connected_workers": {
        "jm-1": {
            "hb": 99.5,
            "available_slots": 4,
            "queues": [[30, "email"], [10, "default"]],
            "inflight": 2,
        }
    },
    "connected_queues": {"email": [[30, "jm-1"]], "default": [[10, "jm-1"]], "reports": []},
}
SCHEDULERS = {"connected_schedulers": {"sched-1": {"hb": 90.0}}, "buffered_schedule_messages": 0}


def snap(taken_at: float = 100.0, **status_changes: object) -> Snapshot:
    return Snapshot(
        admin_addr="tcp://127.0.0.1:1",
        taken_at=taken_at,
        status={**STATUS, **status_changes},
        workers=WORKERS,
        schedulers=SCHEDULERS,
    )


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (None, "-"),
        (0, "0ms"),
        (999, "999ms"),
        (1000, "1.0s"),
        (12_500, "12.5s"),
        (184_000, "3m04s"),
        (7_500_000, "2h05m"),
    ],
)
def test_durations_read_as_short_text(ms, text):
    assert status.duration(ms) == text


@pytest.mark.parametrize(
    ("addr", "connect_to"),
    [
        ("tcp://*:47293", "tcp://127.0.0.1:47293"),
        ("tcp://0.0.0.0:5", "tcp://127.0.0.1:5"),
        ("tcp://10.1.2.3:5", "tcp://10.1.2.3:5"),
        ("ipc:///run/emq.sock", "ipc:///run/emq.sock"),
    ],
)
def test_bound_addresses_become_connectable(addr, connect_to):
    assert status.connectable(addr) == connect_to


def test_table_pads_columns_first_left_rest_right():
    text = status.table(("NAME", "N"), [("a", 1), ("longer", 100)])
    assert text.splitlines() == ["NAME      N", "a         1", "longer  100"]


def test_summary_has_a_row_per_queue_known_anywhere():
    summary = status.summarize(snap())
    rows = {q["queue"]: q for q in summary["queues"]}
    assert list(rows) == ["default", "email", "reports"]  # reports: only in connected_queues
    assert rows["email"] == {
        "queue": "email",
        "waiting": 3,
        "in_flight": 2,
        "waiting_since_ms": 65_000,
        "processed": 40,
        "jobs_per_s": None,  # no previous snapshot: no rate yet
        "age_mean_ms": 1500,
        "age_max_ms": 2500,
        "received": 46,
        "dispatched": 44,
        "failed": 2,
        "retried": 1,
    }
    assert rows["reports"]["waiting"] == 0
    assert rows["reports"]["received"] == 0
    assert summary["totals"] == {
        "waiting": 3,
        "in_flight": 2,
        "processed": 45,
        "jobs_per_s": None,
        "requeued": 2,
        "failed": 2,
        "retried": 1,
        "heartbeats_missed": 1,
        "poisoned": 1,
        "buffered_schedule_messages": 0,
    }


def test_throughput_is_the_processed_change_over_the_elapsed_time():
    before = snap(taken_at=100.0, processed_messages_by_queue={"email": 30, "default": 5})
    after = snap(taken_at=102.0)
    summary = status.summarize(after, before)
    rates = {q["queue"]: q["jobs_per_s"] for q in summary["queues"]}
    assert rates == {"default": 0.0, "email": 5.0, "reports": 0.0}
    assert summary["totals"]["jobs_per_s"] == 5.0


@pytest.mark.parametrize(
    ("router_now", "ago"),
    [(100.0, 0.5), (99.5, 0.0), (50.0, None), (None, 0.5)],
    ids=["after", "same-instant", "clock-behind-heartbeat", "taken-at"],
)
def test_heartbeat_age_uses_the_router_clock_and_hides_nonsense(router_now, ago):
    summary = status.summarize(snap(taken_at=100.0), router_now=router_now)
    assert summary["job_managers"][0]["heartbeat_ago_s"] == ago


def test_render_shows_queues_job_managers_schedulers_and_totals():
    text = status.render(status.summarize(snap(taken_at=102.0), snap(taken_at=100.0)))
    lines = text.splitlines()
    assert lines[0] == "router tcp://127.0.0.1:1"
    header = next(line for line in lines if line.startswith("QUEUE"))
    assert header.split() == [
        "QUEUE", "WAITING", "IN", "FLIGHT", "WAITING", "SINCE",
        "PROCESSED", "JOBS/S", "AGE", "MEAN", "AGE", "MAX",
    ]  # fmt: skip
    email = next(line for line in lines if line.startswith("email"))
    assert email.split() == ["email", "3", "2", "1m05s", "40", "0.0", "1.5s", "2.5s"]
    manager = next(line for line in lines if line.startswith("jm-1"))
    assert manager.split() == ["jm-1", "email:30,default:10", "4", "2", "2.5s", "ago"]
    assert any(line.split() == ["sched-1", "12.0s", "ago"] for line in lines)
    assert lines[-1] == (
        "total: 3 waiting, 2 in flight, 45 processed (0.0 jobs/s), 2 failed, 1 retried, "
        "2 requeued, 1 poisoned"
    )


def test_a_job_manager_that_takes_no_jobs_is_named_with_why():
    workers = {"connected_workers": {**WORKERS["connected_workers"]}}
    workers["connected_workers"]["jm-2"] = {
        "hb": 99.0,
        "available_slots": 0,
        "queues": [[10, "default"]],
        "inflight": 0,
        "trouble": "worker processes cannot start: ImportError: no module named 'x'",
    }
    later = Snapshot(admin_addr="a", taken_at=2.0, status=STATUS, workers=workers)
    summary = status.summarize(later)
    assert [m["trouble"] for m in summary["job_managers"]] == [
        "",
        workers["connected_workers"]["jm-2"]["trouble"],
    ]
    warnings = [line for line in status.render(summary).splitlines() if "takes no jobs" in line]
    assert warnings == [
        "WARNING: job manager jm-2 takes no jobs: worker processes cannot start: "
        "ImportError: no module named 'x'"
    ]


def test_an_older_routers_status_with_lost_messages_still_renders():
    # Earlier routers of ours sent "lost_messages" (always 0); emq_status ignores it.
    older = snap(taken_at=102.0, lost_messages=0)
    summary = status.summarize(older, snap(taken_at=100.0))
    assert "lost" not in summary["totals"]
    assert status.render(summary).splitlines()[-1].endswith(" 2 requeued, 1 poisoned")


def test_render_says_when_nothing_is_connected():
    empty = Snapshot(admin_addr="tcp://127.0.0.1:1", taken_at=1.0)
    text = status.render(status.summarize(empty))
    assert "no queues yet" in text
    assert "no job managers connected" in text
    assert "no schedulers connected" in text


def test_render_adds_the_monitor_section():
    with_monitor = Snapshot(
        admin_addr="a",
        taken_at=1.0,
        monitor={
            "queued": 7,
            "store_bytes": 4096,
            "rate_limited": 4,
            "unique_keys": 2,
            "unique_refused": 1,
            "per_queue": {"email": {"queued": 7}},
        },
    )
    summary = status.summarize(with_monitor)
    text = status.render(summary)
    assert (
        "monitor:\nqueued: 7\nstore_bytes: 4096\nrate_limited: 4\nunique_keys: 2\n"
        "unique_refused: 1\n"
        "queue email: queued=7"
    ) in text
    assert summary["queues"][0]["monitor"] == {"queued": 7}


def test_an_unreachable_router_is_one_clear_line():
    def ask(addr: str, command: str, timeout: float) -> dict[str, object]:
        raise BrokerUnavailable(f"no answer to {command} from {addr} within {timeout}s")

    snapshot = status.fetch("tcp://*:9", timeout=0.1, ask=ask)
    summary = status.summarize(snapshot)
    assert summary["reachable"] is False
    assert status.render(summary) == (
        "router tcp://127.0.0.1:9\n"
        "router unreachable: no answer to STATUS from tcp://127.0.0.1:9 within 0.1s\n"
    )


def test_a_non_json_answer_counts_as_unreachable():
    def ask(addr: str, command: str, timeout: float) -> dict[str, object]:
        return json.loads("not json")  # type: ignore[no-any-return]

    assert status.fetch("tcp://127.0.0.1:9", ask=ask).error.startswith("router unreachable")


class FakeOut:
    """A stream that says it is (or is not) a terminal."""

    def __init__(self, tty: bool) -> None:
        self.tty = tty
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return self.tty


def answering(addr: str, command: str, timeout: float) -> dict[str, object]:
    return {"STATUS": STATUS, "ROUTER_SHOW_WORKERS": WORKERS}.get(command, SCHEDULERS)


@pytest.mark.parametrize(
    ("tty", "as_json", "starts"),
    [(True, False, status.CLEAR + "router "), (False, False, "router "), (False, True, "{")],
    ids=["terminal-redraws", "pipe-appends", "json-lines"],
)
def test_watch_frames(tty, as_json, starts):
    out = FakeOut(tty)
    code = status_command.run(
        "tcp://127.0.0.1:9",
        out,
        watch=True,
        as_json=as_json,
        interval=0.01,
        frames=2,
        ask=answering,
    )  # type: ignore[arg-type]
    assert code == 0
    assert len(out.parts) == 2
    assert all(part.startswith(starts) for part in out.parts)
    if as_json:
        second = json.loads(out.parts[1])
        assert second["totals"]["jobs_per_s"] == 0.0  # the second frame has a rate
