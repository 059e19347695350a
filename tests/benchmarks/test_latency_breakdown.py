"""The latency breakdown: its matching of hop events, and a real run with the hooks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import latency_breakdown as lb

Events = list[lb.Event]


def _job_events(base: int) -> tuple[tuple[int, int, int], Events, Events, Events]:
    """One job whose hops take 1, 2, ... 7 us, from ``base`` ns; the commit after
    its hand-out begins 1.5 us after it, its writes take 20 us, COMMIT 300 us."""
    at = [base + 1000 * sum(range(1, k + 1)) for k in range(8)]
    c0 = at[3] + 1500
    router = [(at[2], "wake"), (at[3], "hand"), (c0, "c0"), (c0 + 20_000, "e0")]
    router.append((c0 + 320_000, "c1"))  # after the start: the job did not wait for it
    manager = [(at[4], "wake"), (at[5], "pipew")]
    workers = [(at[6], "piper")]
    return (at[0], at[1], at[7]), router, manager, workers


def test_split_gives_each_hop_from_where_the_one_before_ended() -> None:
    job, router, manager, workers = _job_events(10**9)
    wake = router[0][0]
    noise = [
        (wake + 200, "send"),  # a reply to a client before the hand-out is not it
        (wake + 300, "c0"),  # nor is a commit before the hand-out the job's
        (wake + 400, "e0"),
        (wake + 500, "c1"),
    ]
    (lined,) = lb.split([job], sorted(router + noise), manager, workers)
    assert lined.hops == [1000 * k for k in range(1, 8)]
    assert len(lined.hops) == len(lb.HOPS)
    assert sum(lined.hops) == job[2] - job[0]
    assert lined.commit == [20_000, 300_000]
    assert len(lined.commit) == len(lb.COMMIT)


def test_split_leaves_out_a_job_whose_events_are_missing() -> None:
    first, router, manager, workers = _job_events(10**9)
    second, router2, manager2, _ = _job_events(2 * 10**9)  # its worker never read it
    lined = lb.split([first, second], router + router2, manager + manager2, workers)
    assert len(lined) == 1


def test_a_job_is_not_handed_out_by_a_send_to_a_client() -> None:
    job, router, manager, workers = _job_events(10**9)
    router = [(stamp, "send" if tag == "hand" else tag) for stamp, tag in router]
    assert lb.split([job], router, manager, workers) == []


def test_a_job_whose_commit_is_missing_keeps_its_hops() -> None:
    job, router, manager, workers = _job_events(10**9)
    router = [event for event in router if event[1] != "c1"]
    (lined,) = lb.split([job], router, manager, workers)
    assert lined.hops == [1000 * k for k in range(1, 8)]
    assert lined.commit is None


def test_the_next_jobs_commit_is_not_this_ones() -> None:
    first, router, manager, workers = _job_events(10**9)
    second, router2, manager2, workers2 = _job_events(2 * 10**9)
    router = [event for event in router if event[1] not in ("c0", "e0", "c1")]
    lined = lb.split([first, second], router + router2, manager + manager2, workers + workers2)
    assert [job.commit for job in lined] == [None, [20_000, 300_000]]


def test_a_router_woken_before_delay_returned_has_no_time_in_flight() -> None:
    (t0, t1, started), router, manager, workers = _job_events(10**9)
    router[0] = (t1 - 100, "wake")
    (lined,) = lb.split([(t0, t1, started)], router, manager, workers)
    assert lined.hops[1] == 0 and lined.hops[2] == 2000 + 3000  # accept from .delay()'s return
    assert sum(lined.hops) == started - t0


def test_a_job_handed_out_before_delay_returned_is_kept_with_its_hops_in_order() -> None:
    (t0, t1, started), router, manager, workers = _job_events(10**9)
    # Woken, and the job sent on, while .delay() was still returning.
    router[0] = (t0 + 100, "wake")
    router[1] = (t0 + 200, "hand")
    (lined,) = lb.split([(t0, t1, started)], router, manager, workers)
    # The hand-out counts from .delay()'s return; the job manager's wake still ends its hop.
    assert lined.hops[:4] == [1000, 0, 0, 9000]
    assert sum(lined.hops) == started - t0
    assert lined.commit == [20_000, 300_000]


def test_the_site_hook_wraps_only_when_its_variable_is_set(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "EMQ_BREAKDOWN_DIR"}
    env["PYTHONPATH"] = os.pathsep.join([str(lb.SITE), str(Path(lb.__file__).parent.parent)])
    probe = (
        "from django_eventmq.runtime import transport;"
        "print(hasattr(transport.Channel.send_frames, '__wrapped__'))"
    )

    def wrapped() -> str:
        done = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    assert wrapped() == "False"
    env["EMQ_BREAKDOWN_DIR"] = str(tmp_path)
    assert wrapped() == "True"


def test_a_real_run_lines_up_every_hop_of_most_jobs(capsys: pytest.CaptureFixture[str]) -> None:
    broker = os.environ.get("EMQ_BROKER_ADDR")
    result = lb.breakdown(30)
    assert os.environ.get("EMQ_BROKER_ADDR") == broker  # the benchmark's router is gone
    # A job lines up only when the router, the job manager and a worker each
    # recorded its events, in path order: the hooks fired in all three.
    assert result["matched"] >= 27, result["matched"]
    assert result["hops"]["to the worker"]["p50"] > 0
    # The commit after each hand-out was found, off the start path.
    assert result["commit_matched"] >= 27, result["commit_matched"]
    assert result["commit"]["router: journal writes"]["p50"] > 0
    assert result["commit"]["router: COMMIT + sync"]["p50"] > 0
    lb.print_breakdown(result, floor_p50=None)
    out = capsys.readouterr().out
    assert f"{result['matched']} of 30 jobs lined up ({30 - result['matched']} without" in out
    table, off_path = out.split("off the start path, not in the sum")
    assert all(hop in table for hop, _ in lb.HOPS)
    assert all(part in off_path and part not in table for part, _ in lb.COMMIT)
