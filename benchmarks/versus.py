"""This checkout against an earlier commit, on this machine, in the same minutes.

    python benchmarks/versus.py --base c809417          # where issue 21's work began
    python benchmarks/versus.py --base HEAD~3 --rounds 3 --jobs 10000
    python benchmarks/versus.py --base HEAD --latency   # low-load latency too

The absolute figures move with the machine: issue 21's end-to-end median
read 25,826 jobs/s on one machine its sessions ran on and 8,423 on another
(about 3x apart), with Huey's moving as much (6,296 and 1,721). A ratio
against an earlier commit measured in turn, with the same harness, moves
much less: it says how much faster the code got.

Each round runs ``throughput.py`` once on the base commit's code and once on
this checkout's, the base first in odd rounds and second in even ones (ours
end to end with 2 workers, then the durable enqueue into the router alone,
with the router's CPU per stored job, ``--durable-jobs`` jobs; no Huey,
reference or ceiling); with ``--latency`` also ``latency.py`` once
(ours and the floor, no Huey; ``--latency-jobs`` jobs), for the low-load
start and ``.wait()`` p50 and how far the start sits above the floor
measured in the same run. The base runs in a temporary git worktree with
this checkout's ``benchmarks/`` copied in, so only the package differs; the
worktree is removed at the end. Prints each round, the medians, and this
checkout over the base.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
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
    ("durable_cpu", "durable: router CPU us/stored job", False),
)
#: With ``--latency``: ``latency.py``'s low-load figures, in milliseconds.
LATENCY_FIGURES = (
    ("start_p50", "low-load start p50, ms", False),
    ("wait_p50", "low-load .wait() p50, ms", False),
    ("above_floor", "start p50 above the floor, ms", False),
)
#: With ``--guaranteed``: ``durable_peers.py --ours-only``'s figures (issue 32's).
GUARANTEED_FIGURES = (
    ("guaranteed_one", "guaranteed one at a time, jobs/s", True),
    ("guaranteed_threads", "guaranteed 8 threads, jobs/s", True),
    ("probe_p50", "low-load start p50 (probe), ms", False),
    ("probe_p99", "low-load start p99 (probe), ms", False),
    ("paced_p99", "start p99 paced 1,000/s, ms", False),
    ("guaranteed_p99", "guaranteed low-load start p99, ms", False),
)
LATENCY_NAMES = frozenset(
    name for name, _label, higher in LATENCY_FIGURES + GUARANTEED_FIGURES if not higher
)
ALL_FIGURES = FIGURES + LATENCY_FIGURES + GUARANTEED_FIGURES


def figures(results: dict[str, Any]) -> dict[str, float]:
    """The compared figures of one ``throughput.py --runs 1 --json`` result."""
    run = results["runs"][0]
    alone = run["enqueue_router_only"]
    found = {
        "end_to_end": float(run["ours"]["end_to_end_per_second"]),
        "durable": float(alone["stored_per_second"]),
        "cpu": float(run["ours"]["cpu_us_per_job"]["total"]),
    }
    if "cpu_us_per_job" in alone:  # throughput.py measures it since this figure came
        found["durable_cpu"] = float(alone["cpu_us_per_job"]["router"])
    return found


def latency_figures(results: dict[str, Any]) -> dict[str, float]:
    """The compared figures of one ``latency.py --runs 1 --skip-huey --json`` result."""
    run = results["runs"][0]
    start = float(run["ours"]["low_load"]["start"]["p50"])
    return {
        "start_p50": start,
        "wait_p50": float(run["ours"]["low_load"]["wait"]["p50"]),
        "above_floor": start - float(run["floor"]["low_load"]["start"]["p50"]),
    }


def guaranteed_figures(results: dict[str, Any]) -> dict[str, float]:
    """The compared figures of one ``durable_peers.py --ours-only --json`` result."""
    ours = results["durable"]["ours"]
    latency = results["latency"]["ours"]
    return {
        "guaranteed_one": float(ours["one"]["per_second"]),
        "guaranteed_threads": float(ours["threads"]["per_second"]),
        "probe_p50": float(latency["low_load"]["start"]["p50"]),
        "probe_p99": float(latency["low_load"]["start"]["p99"]),
        "paced_p99": float(latency["half_peak"]["start"]["p99"]),
        "guaranteed_p99": float(latency["guaranteed_low_load"]["start"]["p99"]),
    }


def compared(runs: list[dict[str, float]]) -> tuple[tuple[str, str, bool], ...]:
    """The figures every one of ``runs`` has (the latency ones only with ``--latency``,
    the guaranteed ones only with ``--guaranteed``)."""
    return tuple(f for f in ALL_FIGURES if all(f[0] in run for run in runs))


def summarize(base: list[dict[str, float]], ours: list[dict[str, float]]) -> dict[str, Any]:
    """Medians of each side and this checkout over the base for each figure
    (where lower is better, CPU per job or a latency: base over ours, how many
    times less it takes)."""
    summary: dict[str, Any] = {}
    for name, _label, higher_better in compared(base + ours):
        b = statistics.median(r[name] for r in base)
        o = statistics.median(r[name] for r in ours)
        ratio = (o / b if higher_better else b / o) if b and o else float("nan")
        summary[name] = {"base": b, "ours": o, "times": ratio}
    return summary


#: Seconds one throughput.py run may take before it is stopped.
RUN_TIMEOUT = 1800.0


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


@contextmanager
def worktree(rev: str, benchmarks: Path = ROOT / "benchmarks") -> Iterator[Path]:
    """A temporary worktree of ``rev`` holding a copy of ``benchmarks`` (this
    checkout's), removed (and unregistered) at the end."""
    parent = Path(tempfile.mkdtemp(prefix="emq-versus-"))
    place = parent / "base"
    made = _git("worktree", "add", "--detach", str(place), rev)
    if made.returncode != 0:
        shutil.rmtree(parent, ignore_errors=True)
        raise SystemExit(f"versus: cannot check out {rev!r}: {made.stderr.strip()}")
    try:
        shutil.copytree(
            benchmarks,
            place / "benchmarks",
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        yield place
    finally:
        for _attempt in range(3):
            _git("worktree", "remove", "--force", "--force", str(place))
            shutil.rmtree(parent, ignore_errors=True)
            # Its directory is gone: forget it, should the remove have failed (another
            # git command holding a lock) or left it registered.
            _git("worktree", "prune")
            if not parent.exists():
                break
        _forget(place)


def _forget(place: Path) -> None:
    """Drop git's record of the worktree at ``place`` if ``prune`` left it (a loaded
    CI run found one still listed): its admin directory names it in ``gitdir``."""
    common = _git("rev-parse", "--git-common-dir").stdout.strip()
    admin = (ROOT / common / "worktrees") if common else None
    if admin is None or not admin.is_dir():
        return
    for entry in admin.iterdir():
        gitdir = entry / "gitdir"
        try:
            named = Path(gitdir.read_text().strip()).parent
        except OSError:
            continue
        if named == place:
            shutil.rmtree(entry, ignore_errors=True)


def run_side(
    root: Path,
    jobs: int,
    warmup: int,
    latency_jobs: int | None = None,
    durable_jobs: int | None = None,
    guaranteed_jobs: int | None = None,
) -> dict[str, float]:
    """``throughput.py`` once with the package found in ``root`` (its durable
    enqueue with ``durable_jobs`` jobs, default ``jobs``; given ``latency_jobs``,
    ``latency.py`` with that many jobs; given ``guaranteed_jobs``,
    ``durable_peers.py --ours-only`` with that many); their figures."""
    found = figures(
        _run_json(
            root,
            "throughput.py",
            *("--runs", "1", "--jobs", str(jobs), "--warmup", str(warmup)),
            *("--durable-jobs", str(durable_jobs or jobs)),
            *("--skip-huey", "--skip-reference", "--skip-ceiling"),
        )
    )
    if latency_jobs is not None:
        found.update(
            latency_figures(
                _run_json(
                    root,
                    "latency.py",
                    *("--runs", "1", "--skip-huey", "--jobs", str(latency_jobs)),
                    *("--load-seconds", str(LATENCY_LOAD_SECONDS)),
                )
            )
        )
    if guaranteed_jobs is not None:
        found.update(
            guaranteed_figures(
                _run_json(
                    root,
                    "durable_peers.py",
                    *("--ours-only", "--jobs", str(guaranteed_jobs)),
                    *("--latency-jobs", str(latency_jobs or GUARANTEED_LATENCY_JOBS)),
                    *("--load-seconds", str(GUARANTEED_LOAD_SECONDS)),
                )
            )
        )
    return found


#: ``durable_peers.py --ours-only``'s latency jobs without ``--latency``, and its
#: paced run's length (seconds) at 1,000 jobs/s.
GUARANTEED_LATENCY_JOBS = 2000
GUARANTEED_LOAD_SECONDS = 3.0


#: ``latency.py --load-seconds`` here: the half-peak run is not compared.
LATENCY_LOAD_SECONDS = 1.0


def _run_json(root: Path, script: str, *args: str) -> dict[str, Any]:
    """``benchmarks/SCRIPT ARGS --json FILE`` with the package found in ``root``;
    what it wrote.

    It runs in a session of its own: stopped (timeout, Ctrl-C), it is ended
    with every router and job manager it started, not only itself; finished,
    whatever of it still runs (a worker process outliving its job manager) is
    killed. It writes no bytecode: nothing of it lands in the base's worktree
    while that is being removed."""
    with tempfile.NamedTemporaryFile(prefix="emq-versus-", suffix=".json") as out:
        proc = subprocess.Popen(
            [sys.executable, str(root / "benchmarks" / script), *args, "--json", out.name],
            cwd=root,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            output, _ = proc.communicate(timeout=RUN_TIMEOUT)
        except BaseException:
            _end_session(proc)
            raise
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # what the finished run left behind
        if proc.returncode != 0:
            raise RuntimeError(
                f"{script} failed in {root} (exit {proc.returncode}):\n{output[-2000:]}"
            )
        result: dict[str, Any] = json.loads(Path(out.name).read_text())
        return result


def _end_session(proc: subprocess.Popen[str]) -> None:
    """SIGTERM to ``proc``'s whole session (its processes stop their own), then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _line(label: str, result: dict[str, float]) -> str:
    line = (
        f"{label}: end to end {result['end_to_end']:,.0f}/s, durable enqueue "
        f"{result['durable']:,.0f}/s, CPU {result['cpu']:.1f} us/job"
    )
    if "durable_cpu" in result:
        line += f", router {result['durable_cpu']:.1f} us/stored job"
    if "start_p50" in result:
        line += (
            f"; low-load start p50 {result['start_p50']:.3f} ms (floor +"
            f"{result['above_floor']:.3f}), .wait() p50 {result['wait_p50']:.3f} ms"
        )
    if "guaranteed_one" in result:
        line += (
            f"; guaranteed {result['guaranteed_one']:,.0f}/s one at a time, "
            f"{result['guaranteed_threads']:,.0f}/s 8 threads; start p50/p99 "
            f"{result['probe_p50']:.3f}/{result['probe_p99']:.3f} ms, paced p99 "
            f"{result['paced_p99']:.3f}, guaranteed p99 {result['guaranteed_p99']:.3f}"
        )
    return line


def print_summary(rev: str, summary: dict[str, Any]) -> None:
    print(f"\nmedians; this checkout over {rev} (CPU, latency: {rev}'s over ours)")
    print(f"{'':34}{rev[:12]:>14}{'this checkout':>16}{'times':>8}")
    for name, label, _higher in ALL_FIGURES:
        row = summary.get(name)
        if row is None:
            continue
        digits = 3 if name in LATENCY_NAMES else 1
        print(
            f"{label:34}{row['base']:>14,.{digits}f}{row['ours']:>16,.{digits}f}"
            f"{row['times']:>7.2f}x"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="This checkout's throughput against an earlier commit's, alternating.",
    )
    parser.add_argument(
        "--base", required=True, help="the commit to compare with (c809417: issue 21's start)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="rounds of one run each side (who goes first alternates)",
    )
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per measurement")
    parser.add_argument("--warmup", type=int, default=500, help="jobs sent before measuring")
    parser.add_argument(
        "--durable-jobs",
        type=int,
        help="jobs for the durable enqueue (default: --jobs; 60000 give a steadier router CPU)",
    )
    parser.add_argument(
        "--latency",
        action="store_true",
        help="also run latency.py (ours and the floor) on each side: low-load p50s",
    )
    parser.add_argument(
        "--latency-jobs", type=int, default=2000, help="latency.py --jobs with --latency"
    )
    parser.add_argument(
        "--guaranteed",
        type=int,
        metavar="JOBS",
        help="also durable_peers.py --ours-only with JOBS guaranteed jobs on each side "
        "(issue 32: guaranteed sends one at a time and threaded, start p50/p99)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    options = parser.parse_args(argv)
    durable_jobs = options.durable_jobs if options.durable_jobs is not None else options.jobs
    if min(options.rounds, options.jobs, options.latency_jobs, durable_jobs) < 1:
        parser.error("--rounds, --jobs, --durable-jobs and --latency-jobs must be at least 1")
    latency_jobs = options.latency_jobs if options.latency else None
    base_runs: list[dict[str, float]] = []
    our_runs: list[dict[str, float]] = []
    with worktree(options.base) as base_root:
        sides = [(options.base, base_root, base_runs), ("this checkout", ROOT, our_runs)]
        for number in range(1, options.rounds + 1):
            # Who goes first alternates: a run can leave the next one a warmer (or
            # busier) machine, and that must not always favour the same side.
            for label, root, runs in sides if number % 2 else sides[::-1]:
                print(f"[{number}/{options.rounds}] {label} ...", flush=True)
                runs.append(
                    run_side(
                        root,
                        options.jobs,
                        options.warmup,
                        latency_jobs,
                        durable_jobs,
                        options.guaranteed,
                    )
                )
                print("  " + _line(label, runs[-1]), flush=True)
    summary = summarize(base_runs, our_runs)
    print_summary(options.base, summary)
    if options.json:
        record = {"base": options.base, "base_runs": base_runs, "runs": our_runs, **summary}
        options.json.write_text(json.dumps(record, indent=2) + "\n")
        print(f"\nwrote {options.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
