"""This checkout against an earlier commit, on this machine, in the same minutes.

    python benchmarks/versus.py --base c809417          # where issue 21's work began
    python benchmarks/versus.py --base HEAD~3 --rounds 3 --jobs 10000

The absolute figures move with the machine: issue 21's end-to-end median
read 25,826, 8,423 and 14,373 jobs/s on the three machines its sessions ran
on, with little code changed between the last two, and Huey's moved as much
(6,296, 1,721 and 3,032). A ratio against an earlier commit measured in turn,
with the same harness, moves much less: it says how much faster the code got.

Each round runs ``throughput.py`` once on the base commit's code and once on
this checkout's, alternating (ours end to end with 2 workers, then the
durable enqueue into the router alone; no Huey, reference or ceiling). The
base runs in a temporary git worktree with this checkout's ``benchmarks/``
copied in, so only the package differs; the worktree is removed at the end.
Prints each round, the medians, and this checkout over the base.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: The figures compared, as (name in the output, what it means, higher is better).
FIGURES = (
    ("end_to_end", "end to end, jobs/s", True),
    ("durable", "durable enqueue, stored/s", True),
    ("cpu", "CPU us/job, all processes", False),
)


def figures(results: dict[str, Any]) -> dict[str, float]:
    """The compared figures of one ``throughput.py --runs 1 --json`` result."""
    run = results["runs"][0]
    return {
        "end_to_end": float(run["ours"]["end_to_end_per_second"]),
        "durable": float(run["enqueue_router_only"]["stored_per_second"]),
        "cpu": float(run["ours"]["cpu_us_per_job"]["total"]),
    }


def summarize(base: list[dict[str, float]], ours: list[dict[str, float]]) -> dict[str, Any]:
    """Medians of each side and this checkout over the base for each figure
    (for CPU per job, base over ours: how many times less it takes)."""
    summary: dict[str, Any] = {}
    for name, _label, higher_better in FIGURES:
        b = statistics.median(r[name] for r in base)
        o = statistics.median(r[name] for r in ours)
        ratio = (o / b if higher_better else b / o) if b and o else float("nan")
        summary[name] = {"base": b, "ours": o, "times": ratio}
    return summary


@contextmanager
def worktree(rev: str) -> Iterator[Path]:
    """A temporary worktree of ``rev`` holding this checkout's ``benchmarks/``."""
    parent = Path(tempfile.mkdtemp(prefix="emq-versus-"))
    place = parent / parent.name  # git names the worktree after it: unique
    made = subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(place), rev],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        shutil.rmtree(parent, ignore_errors=True)
        raise SystemExit(f"versus: cannot check out {rev!r}: {made.stderr.strip()}")
    try:
        shutil.copytree(
            ROOT / "benchmarks",
            place / "benchmarks",
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        yield place
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(place)],
            capture_output=True,
        )
        shutil.rmtree(parent, ignore_errors=True)


def run_side(root: Path, jobs: int, warmup: int) -> dict[str, float]:
    """``throughput.py`` once with the package found in ``root``; its figures."""
    with tempfile.NamedTemporaryFile(prefix="emq-versus-", suffix=".json") as out:
        done = subprocess.run(
            [
                sys.executable,
                str(root / "benchmarks" / "throughput.py"),
                *("--runs", "1", "--jobs", str(jobs), "--warmup", str(warmup)),
                *("--skip-huey", "--skip-reference", "--skip-ceiling", "--json", out.name),
            ],
            cwd=root,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            tail = (done.stdout + done.stderr)[-2000:]
            raise RuntimeError(f"throughput.py failed in {root} (exit {done.returncode}):\n{tail}")
        return figures(json.loads(Path(out.name).read_text()))


def _line(label: str, result: dict[str, float]) -> str:
    return (
        f"{label}: end to end {result['end_to_end']:,.0f}/s, durable enqueue "
        f"{result['durable']:,.0f}/s, CPU {result['cpu']:.1f} us/job"
    )


def print_summary(rev: str, summary: dict[str, Any]) -> None:
    print(f"\nmedians; this checkout over {rev} (CPU: {rev}'s over ours)")
    print(f"{'':34}{rev[:12]:>14}{'this checkout':>16}{'times':>8}")
    for name, label, _higher in FIGURES:
        row = summary[name]
        print(f"{label:34}{row['base']:>14,.1f}{row['ours']:>16,.1f}{row['times']:>7.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="This checkout's throughput against an earlier commit's, alternating.",
    )
    parser.add_argument(
        "--base", required=True, help="the commit to compare with (c809417: issue 21's start)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="base then ours, this many times")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per measurement")
    parser.add_argument("--warmup", type=int, default=500, help="jobs sent before measuring")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    options = parser.parse_args(argv)
    base_runs: list[dict[str, float]] = []
    our_runs: list[dict[str, float]] = []
    with worktree(options.base) as base_root:
        for number in range(1, options.rounds + 1):
            print(f"[{number}/{options.rounds}] {options.base} ...", flush=True)
            base_runs.append(run_side(base_root, options.jobs, options.warmup))
            print("  " + _line(options.base, base_runs[-1]), flush=True)
            print(f"[{number}/{options.rounds}] this checkout ...", flush=True)
            our_runs.append(run_side(ROOT, options.jobs, options.warmup))
            print("  " + _line("this checkout", our_runs[-1]), flush=True)
    summary = summarize(base_runs, our_runs)
    print_summary(options.base, summary)
    if options.json:
        record = {"base": options.base, "base_runs": base_runs, "runs": our_runs, **summary}
        options.json.write_text(json.dumps(record, indent=2) + "\n")
        print(f"\nwrote {options.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
