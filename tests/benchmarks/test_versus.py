"""benchmarks/versus.py: this checkout against an earlier commit, on real processes."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import versus
from tests.support import wait_for

# The tests that check a commit out run in one xdist worker, one after the other.
pytestmark = pytest.mark.xdist_group("versus")


def _toplevel() -> str:
    if shutil.which("git") is None:
        return ""
    found = subprocess.run(
        ["git", "-C", str(versus.ROOT), "rev-parse", "--show-toplevel"],
        capture_output=True,
        text=True,
    )
    return found.stdout.strip() if found.returncode == 0 else ""


# A copy of the project without its own git history (an sdist, an exported
# tree) has no commit to compare with.
needs_git = pytest.mark.skipif(
    _toplevel() != str(versus.ROOT), reason="needs git and a git checkout of this project"
)


def _worktrees() -> set[str]:
    listed = subprocess.run(
        ["git", "-C", str(versus.ROOT), "worktree", "list", "--porcelain"],
        capture_output=True,
        text=True,
    ).stdout
    return {line.split(" ", 1)[1] for line in listed.splitlines() if line.startswith("worktree ")}


@needs_git
def test_a_round_against_head_measures_both_sides_with_the_same_harness(tmp_path, capsys):
    before = _worktrees()
    out = tmp_path / "versus.json"
    # The router's CPU is read in clock ticks (10 ms): 300 stored jobs (about 5 ms)
    # often read 0.0; 3,000 take several ticks.
    args = ["--base", "HEAD", "--rounds", "1", "--jobs", "300", "--warmup", "50"]
    args += ["--durable-jobs", "3000"]
    assert versus.main([*args, "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["base"] == "HEAD"
    for side in (record["base_runs"][0], record["runs"][0]):
        assert side["end_to_end"] > 0 and side["durable"] > 0 and side["cpu"] > 0
        assert side["durable_cpu"] > 0
    for name in ("end_to_end", "durable", "cpu", "durable_cpu"):
        assert record[name]["times"] > 0
    printed = capsys.readouterr().out
    assert "end to end, jobs/s" in printed and "this checkout over HEAD" in printed
    assert _worktrees() == before  # the base's worktree is gone


@needs_git
def test_the_worktree_runs_the_base_package_with_the_given_benchmarks(tmp_path):
    source = tmp_path / "benchmarks"
    source.mkdir()
    (source / "marker.txt").write_text("copied")
    with versus.worktree("HEAD", benchmarks=source) as place:
        assert (place / "benchmarks" / "marker.txt").read_text() == "copied"
        assert str(place) in _worktrees()
        # What throughput.py does (its root first on sys.path) finds the base's package.
        code = (
            "import sys; sys.path.insert(0, '.'); "
            "import django_eventmq; print(django_eventmq.__file__)"
        )
        found = subprocess.run(
            [sys.executable, "-c", code], cwd=place, capture_output=True, text=True, check=True
        )
        assert Path(found.stdout.strip()).is_relative_to(place)
    assert not place.exists()
    assert str(place) not in _worktrees()


@needs_git
def test_a_commit_that_does_not_exist_is_refused_with_its_name():
    refused = pytest.raises(SystemExit, match="cannot check out 'no-such-rev'")
    with refused, versus.worktree("no-such-rev"):
        pass  # pragma: no cover - never entered


def _fake_root(tmp_path: Path, script: str) -> Path:
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "throughput.py").write_text(script)
    return tmp_path


def test_a_failing_run_says_where_and_shows_its_output(tmp_path):
    root = _fake_root(tmp_path, "import sys\nprint('no router today')\nsys.exit(3)\n")
    with pytest.raises(RuntimeError, match=r"(?s)exit 3.*no router today"):
        versus.run_side(root, 10, 1)


def test_a_run_past_its_timeout_is_ended_with_the_processes_it_started(tmp_path, monkeypatch):
    # A "benchmark" that starts a process of its own and never finishes.
    pid_file = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(600)\n"
    )
    root = _fake_root(tmp_path, script)
    monkeypatch.setattr(versus, "RUN_TIMEOUT", 3.0)
    with pytest.raises(subprocess.TimeoutExpired):
        versus.run_side(root, 10, 1)
    child = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), 10, "the child pid"))

    def gone() -> bool:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return True
        # A zombie (its parent, killed too, has not been reaped by init yet) is gone.
        return Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"

    wait_for(gone, 20, "the benchmark's own process to be ended")


def test_bad_arguments_are_refused(capsys):
    with pytest.raises(SystemExit) as stopped:
        versus.main(["--base", "HEAD", "--rounds", "0"])
    assert stopped.value.code == 2
    said = "--rounds, --jobs, --durable-jobs and --latency-jobs must be at least 1"
    assert said in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        versus.main(["--base", "HEAD", "--latency", "--latency-jobs", "0"])
    assert stopped.value.code == 2
    with pytest.raises(SystemExit) as stopped:
        versus.main(["--base", "HEAD", "--durable-jobs", "0"])
    assert stopped.value.code == 2


def test_figures_are_read_from_throughputs_json():
    result = {
        "runs": [
            {
                "ours": {"end_to_end_per_second": 1234.5, "cpu_us_per_job": {"total": 80.0}},
                "enqueue_router_only": {"stored_per_second": 5000.0},
            }
        ]
    }
    assert versus.figures(result) == {"end_to_end": 1234.5, "durable": 5000.0, "cpu": 80.0}
    # Since throughput.py measures it: the router's CPU per stored job too.
    alone = result["runs"][0]["enqueue_router_only"]
    alone["cpu_us_per_job"] = {"router": 21.5, "client": 3.0, "total": 24.5}
    assert versus.figures(result)["durable_cpu"] == 21.5


def test_summary_takes_medians_and_inverts_the_cpu_ratio():
    base = [
        {"end_to_end": 100.0, "durable": 10.0, "cpu": 200.0},
        {"end_to_end": 300.0, "durable": 30.0, "cpu": 100.0},
        {"end_to_end": 200.0, "durable": 20.0, "cpu": 150.0},
    ]
    ours = [
        {"end_to_end": 400.0, "durable": 50.0, "cpu": 50.0},
        {"end_to_end": 500.0, "durable": 40.0, "cpu": 75.0},
        {"end_to_end": 600.0, "durable": 30.0, "cpu": 100.0},
    ]
    summary = versus.summarize(base, ours)
    assert summary["end_to_end"] == {"base": 200.0, "ours": 500.0, "times": 2.5}
    assert summary["durable"] == {"base": 20.0, "ours": 40.0, "times": 2.0}
    assert summary["cpu"] == {"base": 150.0, "ours": 75.0, "times": 2.0}  # half the CPU: 2x
    zero = versus.summarize([{"end_to_end": 0.0, "durable": 1.0, "cpu": 1.0}], base[:1])
    assert math.isnan(zero["end_to_end"]["times"])


def test_latency_figures_are_read_from_latencys_json():
    result = {
        "runs": [
            {
                "ours": {"low_load": {"start": {"p50": 0.7}, "wait": {"p50": 1.2}}},
                "floor": {"low_load": {"start": {"p50": 0.25}, "wait": {"p50": 0.4}}},
            }
        ]
    }
    assert versus.latency_figures(result) == pytest.approx(
        {"start_p50": 0.7, "wait_p50": 1.2, "above_floor": 0.45}
    )


def test_latency_is_compared_only_when_every_run_has_it():
    plain = {"end_to_end": 100.0, "durable": 10.0, "cpu": 200.0}
    timed = {**plain, "start_p50": 0.8, "wait_p50": 1.2, "above_floor": 0.5}
    quicker = {**plain, "start_p50": 0.4, "wait_p50": 0.6, "above_floor": 0.2}
    both = versus.summarize([timed], [quicker])
    assert both["start_p50"]["times"] == pytest.approx(2.0)  # half the latency: 2x
    assert both["above_floor"]["times"] == pytest.approx(2.5)
    assert "start_p50" not in versus.summarize([plain], [quicker])


@needs_git
def test_a_round_with_latency_measures_the_low_load_start_on_both_sides(tmp_path, capsys):
    out = tmp_path / "versus.json"
    # The router's CPU is read in clock ticks (10 ms): 300 stored jobs (about 5 ms)
    # often read 0.0; 3,000 take several ticks.
    args = ["--base", "HEAD", "--rounds", "1", "--jobs", "300", "--warmup", "50"]
    args += ["--durable-jobs", "3000"]
    assert versus.main([*args, "--latency", "--latency-jobs", "60", "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    for side in (record["base_runs"][0], record["runs"][0]):
        assert side["start_p50"] > 0 and side["wait_p50"] >= side["start_p50"]
        assert math.isfinite(side["above_floor"])
    assert record["start_p50"]["times"] > 0
    printed = capsys.readouterr().out
    assert "low-load start p50, ms" in printed and "floor +" in printed


def test_ours_only_gives_the_guaranteed_figures_versus_compares():
    """``durable_peers.py --ours-only`` (what ``versus.py --guaranteed`` runs on each
    side), for real on a few jobs and as versus runs it (a process of its own: it
    points this process's settings at the router it starts): every compared figure
    is read from its JSON."""
    args = ["--ours-only", "--jobs", "60", "--latency-jobs", "40", "--load-seconds", "0.2"]
    found = versus.guaranteed_figures(versus._run_json(versus.ROOT, "durable_peers.py", *args))
    assert set(found) == {name for name, _label, _higher in versus.GUARANTEED_FIGURES}
    assert all(value > 0 for value in found.values()), found


def test_a_lower_latency_reads_as_times_less_and_more_jobs_as_times_more():
    base = [{"guaranteed_one": 1000.0, "probe_p99": 3.0}]
    ours = [{"guaranteed_one": 1500.0, "probe_p99": 1.0}]
    summary = versus.summarize(base, ours)
    assert summary["guaranteed_one"]["times"] == 1.5
    assert summary["probe_p99"]["times"] == 3.0  # base's over ours: 3x less
    assert "end_to_end" not in summary  # only what both sides measured
