"""The latency benchmark's floor: real relay, manager and child processes."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

from benchmarks._floor import Floor
from benchmarks.latency import print_floor


def test_floor_answers_each_job_with_a_start_stamp_between_send_and_reply():
    floor = Floor(sync=True)
    try:
        answers = [floor.one(timeout=30) for _ in range(20)]
    finally:
        floor.stop()
    for sent, started, replied in answers:
        assert sent < started < replied
    # One job at a time: each is sent after the previous reply came back.
    for (_, _, replied), (sent, _, _) in itertools.pairwise(answers):
        assert replied <= sent


def test_floor_stop_leaves_no_sync_file_and_no_process():
    floor = Floor(sync=True)
    sync_file = floor._sync_file
    relay, manager = floor.relay.popen, floor.manager.popen if floor.manager else None
    floor.one(timeout=30)
    floor.stop()
    assert relay.poll() is not None
    assert manager is not None and manager.poll() is not None
    assert not os.path.exists(sync_file)


def test_unknown_role_is_refused_with_the_roles_named():
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks._floor", "nope"], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "child, manager or relay" in done.stderr


def test_print_floor_says_how_much_of_ours_is_above_it(capsys):
    def figures(p50: float) -> dict[str, float]:
        return {"p50": p50, "p99": p50 * 2, "max": p50 * 3, "n": 10}

    print_floor(
        {
            "ours": {"low_load": {"start": figures(0.5), "wait": figures(0.9)}},
            "floor": {"low_load": {"start": figures(0.3), "wait": figures(0.4)}},
        }
    )
    out = capsys.readouterr().out
    assert "low-load start p50: +0.200 ms (ours 0.500 = floor 0.300 + our code)" in out
    assert "low-load .wait() p50: +0.500 ms (ours 0.900 = floor 0.400 + our code)" in out
