"""The latency breakdown: its matching of hop events, and a real run with the hooks."""

from __future__ import annotations

import os
import subprocess
import sys

from benchmarks import latency_breakdown as lb


def _job_events(base: int) -> tuple[tuple[int, int, int], list, list, list]:
    """One job whose hops take 1, 2, ... 10 us, from ``base`` ns."""
    at = [base + 1000 * sum(range(1, k + 1)) for k in range(11)]
    router = [(at[2], "wake"), (at[3], "c0"), (at[4], "e0"), (at[5], "c1"), (at[6], "send")]
    manager = [(at[7], "wake"), (at[8], "pipew")]
    workers = [(at[9], "piper")]
    return (at[0], at[1], at[10]), router, manager, workers


def test_split_gives_each_hop_from_where_the_one_before_ended() -> None:
    job, router, manager, workers = _job_events(10**9)
    noise = [(10**9 + 500, "send")]  # a send before the job's commit is not its hand-out
    (hops,) = lb.split([job], sorted(router + noise), manager, workers)
    assert hops == [1000 * k for k in range(1, 11)]
    assert len(hops) == len(lb.HOPS)


def test_split_leaves_out_a_job_whose_events_are_missing() -> None:
    first, router, manager, workers = _job_events(10**9)
    second, router2, manager2, _ = _job_events(2 * 10**9)  # its worker never read it
    hops = lb.split([first, second], router + router2, manager + manager2, workers)
    assert len(hops) == 1


def test_a_router_woken_before_delay_returned_has_no_time_in_flight() -> None:
    (t0, t1, started), router, manager, workers = _job_events(10**9)
    router[0] = (t1 - 100, "wake")
    (hops,) = lb.split([(t0, t1, started)], router, manager, workers)
    assert hops[1] == 0 and hops[2] == 2000 + 3000  # its accept began when .delay() returned
    assert sum(hops) == started - t0


def test_a_job_committed_before_delay_returned_is_kept_with_its_hops_in_order() -> None:
    (t0, t1, started), router, manager, workers = _job_events(10**9)
    # Woken and into its commit while .delay() was still returning.
    router[0] = (t0 + 100, "wake")
    router[1] = (t0 + 200, "c0")
    (hops,) = lb.split([(t0, t1, started)], router, manager, workers)
    # Accept and the writes count from .delay()'s return; the writes still end at e0.
    assert hops[:5] == [1000, 0, 0, 9000, 5000]
    assert sum(hops) == started - t0


def test_the_site_hook_wraps_only_when_its_variable_is_set(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "EMQ_BREAKDOWN_DIR"}
    env["PYTHONPATH"] = os.pathsep.join([str(lb.SITE), str(lb.Path(lb.__file__).parent.parent)])
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


def test_a_real_run_lines_up_every_hop_of_most_jobs(capsys) -> None:
    broker = os.environ.get("EMQ_BROKER_ADDR")
    result = lb.breakdown(30)
    assert os.environ.get("EMQ_BROKER_ADDR") == broker  # the benchmark's router is gone
    # A job lines up only when the router, the job manager and a worker each
    # recorded its events, in path order: the hooks fired in all three.
    assert result["matched"] >= 27, result["matched"]
    assert result["hops"]["router: COMMIT + sync"]["p50"] > 0
    assert result["hops"]["to the worker"]["p50"] > 0
    lb.print_breakdown(result, floor_p50=None)
    out = capsys.readouterr().out
    assert f"{result['matched']} of 30 jobs lined up ({30 - result['matched']} without" in out
