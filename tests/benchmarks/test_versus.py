"""benchmarks/versus.py: this checkout against an earlier commit, on real processes."""

from __future__ import annotations

import json
import math
import subprocess

import pytest

from benchmarks import versus

# A copy of the project without its git history (an sdist, an exported tree)
# has no commit to compare with.
_HEAD = subprocess.run(
    ["git", "-C", str(versus.ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
)
needs_git = pytest.mark.skipif(
    _HEAD.returncode != 0, reason=f"needs a git checkout: {_HEAD.stderr.strip()}"
)


def _worktrees() -> str:
    return subprocess.run(
        ["git", "-C", str(versus.ROOT), "worktree", "list"], capture_output=True, text=True
    ).stdout


@needs_git
def test_a_round_against_head_measures_both_sides_with_the_same_harness(tmp_path, capsys):
    out = tmp_path / "versus.json"
    args = ["--base", "HEAD", "--rounds", "1", "--jobs", "300", "--warmup", "50"]
    assert versus.main([*args, "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["base"] == "HEAD"
    for side in (record["base_runs"][0], record["runs"][0]):
        assert side["end_to_end"] > 0 and side["durable"] > 0 and side["cpu"] > 0
    for name in ("end_to_end", "durable", "cpu"):
        assert record[name]["times"] > 0
    printed = capsys.readouterr().out
    assert "end to end, jobs/s" in printed and "this checkout over HEAD" in printed
    assert "emq-versus-" not in _worktrees()  # the base's worktree is gone


@needs_git
def test_the_worktree_holds_the_base_package_and_this_checkouts_benchmarks():
    with versus.worktree("HEAD") as place:
        assert (place / "django_eventmq" / "__init__.py").exists()
        here = (versus.ROOT / "benchmarks" / "versus.py").read_text()
        assert (place / "benchmarks" / "versus.py").read_text() == here
        assert str(place) in _worktrees()
    assert not place.exists()
    assert str(place) not in _worktrees()


@needs_git
def test_a_commit_that_does_not_exist_is_refused_with_its_name():
    refused = pytest.raises(SystemExit, match="cannot check out 'no-such-rev'")
    with refused, versus.worktree("no-such-rev"):
        pass  # pragma: no cover - never entered


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
