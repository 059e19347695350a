"""Latency of one job: from ``.delay()`` to the job starting, and to ``.wait()`` returning.

    python benchmarks/latency.py                  # ours and Huey + Redis
    python benchmarks/latency.py --jobs 500 --load-seconds 3 --skip-huey
    python benchmarks/latency.py --runs 5         # ours and Huey in turn, 5 times; medians
    python benchmarks/latency.py --json out.json

For each system, with 2 worker processes and one client in this process:

- **low load**: ``--jobs`` jobs one at a time (send, wait, send the next);
- **peak**: ``--jobs`` jobs sent as fast as possible while a second thread
  waits for them in order; jobs per second from the first send to the last
  result;
- **half peak**: jobs sent at half that rate for ``--load-seconds``, paced by
  the clock, waited for by a second thread.

The job returns ``time.monotonic_ns()`` when it starts; CLOCK_MONOTONIC is one
clock for every process on Linux, so start latency is that minus the reading
taken just before ``.delay()``. Figures are p50 / p99 / max in milliseconds.
Ours runs with its defaults (journal on, ``JOURNAL_SYNC=full``: each job is
stored before it is acknowledged); Huey's Redis keeps nothing on disk.

Beside them, at low load, **the floor** (``benchmarks/_floor.py``): our path's
hops and its one disk sync played by processes with no logic at all (client ->
relay with an ``fdatasync`` -> manager -> child over a pipe, and back). It is
what this machine's wake-ups, loopback TCP and disk flush cost on their own;
ours minus the floor is what our code adds. Run in the same run, it tells a
slow minute (or a slow machine) from a slow change.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._floor import Floor
from benchmarks._huey import HueyStack, huey_missing
from benchmarks._peers import start_ours
from benchmarks._summary import Target, median_of, write_json

#: Issue 21's targets at low load, in milliseconds of start latency.
TARGET_P50_MS = 0.5
TARGET_P99_MS = 2.0

#: At peak, at most this many jobs are sent before waiting for the oldest.
WINDOW = 1000

#: send() returns a handle; wait(handle, timeout) returns the job's start time
#: (monotonic ns), or None when it has not finished within ``timeout`` seconds.
Send = Callable[[], Any]
Wait = Callable[[Any, float], int | None]


def percentiles(samples_ns: list[int]) -> dict[str, float]:
    """p50, p99 and max of nanosecond samples, in milliseconds (nearest rank)."""
    if not samples_ns:
        return {"p50": float("nan"), "p99": float("nan"), "max": float("nan"), "n": 0}
    ordered = sorted(samples_ns)

    def rank(p: float) -> float:
        index = min(len(ordered) - 1, max(0, round(p * len(ordered) + 0.5) - 1))
        return ordered[index] / 1e6

    return {"p50": rank(0.50), "p99": rank(0.99), "max": ordered[-1] / 1e6, "n": len(ordered)}


def one_at_a_time(send: Send, wait: Wait, jobs: int) -> dict[str, Any]:
    """Send a job, wait for it, repeat: latency with nothing else in the system."""
    start_ns: list[int] = []
    wait_ns: list[int] = []
    for _ in range(jobs):
        t0 = time.monotonic_ns()
        started = wait(send(), 60.0)
        t1 = time.monotonic_ns()
        if started is None:
            raise TimeoutError("a job sent alone did not finish within 60 s")
        start_ns.append(started - t0)
        wait_ns.append(t1 - t0)
    return {"start": percentiles(start_ns), "wait": percentiles(wait_ns)}


def paced(send: Send, wait: Wait, jobs: int, rate: float | None) -> dict[str, Any]:
    """Send ``jobs`` jobs at ``rate`` per second (None: as fast as possible), waiting
    for the oldest unanswered one between sends; latencies and the achieved jobs/s.

    One thread does both, because our outcome comes back on the sending thread's
    socket (as ``.wait()``'s docstring says); a reply read while waiting for an
    older job is kept by the client, so the next wait returns it at once.
    """
    pending: deque[tuple[int, Any]] = deque()
    start_ns: list[int] = []
    wait_ns: list[int] = []
    interval_ns = 0 if rate is None else int(1e9 / rate)
    first = due = time.monotonic_ns()
    sent = 0
    deadline = 0
    while sent < jobs or pending:
        now = time.monotonic_ns()
        if sent < jobs and now >= due:
            pending.append((now, send()))
            sent += 1
            due += interval_ns
            deadline = now + 60_000_000_000
            if interval_ns == 0 and len(pending) < WINDOW:
                continue
        if not pending:
            time.sleep(max(0, due - now) / 1e9)  # pacing the load, not waiting for a condition
            continue
        until_due = (due - now) / 1e9 if sent < jobs else 1.0
        started = wait(pending[0][1], max(0.0, min(until_due, 0.05)))
        if started is None:
            if time.monotonic_ns() > deadline:
                raise TimeoutError(f"no outcome for job {pending[0][1]} within 60 s")
            continue
        t0, _ = pending.popleft()
        t1 = time.monotonic_ns()
        start_ns.append(started - t0)
        wait_ns.append(t1 - t0)
        last = t1
    seconds = (last - first) / 1e9
    return {
        "jobs": jobs,
        "rate_asked": rate,
        "jobs_per_second": jobs / seconds,
        "start": percentiles(start_ns),
        "wait": percentiles(wait_ns),
    }


def measure(name: str, send: Send, wait: Wait, jobs: int, load_seconds: float) -> dict[str, Any]:
    """The three runs (low load, peak, half peak) for one system."""
    for _ in range(min(200, jobs)):  # warm-up: connections, imports, worker caches
        if wait(send(), 60.0) is None:
            raise TimeoutError(f"{name}: a warm-up job did not finish within 60 s")
    print(f"  {name}: low load, {jobs} jobs one at a time ...", flush=True)
    low = one_at_a_time(send, wait, jobs)
    print(f"  {name}: peak, {jobs} jobs as fast as possible ...", flush=True)
    peak = paced(send, wait, jobs, None)
    rate = peak["jobs_per_second"] / 2
    count = max(100, int(rate * load_seconds))
    print(f"  {name}: half peak, {count} jobs at {rate:,.0f}/s ...", flush=True)
    half = paced(send, wait, count, rate)
    return {"low_load": low, "peak": peak, "half_peak": half}


def measure_ours(jobs: int, load_seconds: float) -> dict[str, Any]:
    from benchmarks._client_compat import close_clients
    from benchmarks.noop_jobs import stamp
    from django_eventmq.errors import ResultTimeout
    from django_eventmq.runtime import config

    stack = start_ours(concurrency=2)
    os.environ["EMQ_BROKER_ADDR"] = stack.frontend
    config.reset()
    try:

        def wait(handle: Any, timeout: float) -> int | None:
            try:
                return int(handle.wait(timeout=timeout))
            except ResultTimeout:
                return None

        return measure("ours", stamp.delay, wait, jobs, load_seconds)
    finally:
        close_clients()
        stack.stop()


def measure_floor(jobs: int) -> dict[str, Any]:
    """The floor at low load (module doc): start and wait latency, one job at a time."""
    floor = Floor(sync=True)
    try:
        for _ in range(min(200, jobs)):  # warm-up, as for the others
            floor.one()
        start_ns: list[int] = []
        wait_ns: list[int] = []
        for _ in range(jobs):
            sent, started, replied = floor.one()
            start_ns.append(started - sent)
            wait_ns.append(replied - sent)
        return {"low_load": {"start": percentiles(start_ns), "wait": percentiles(wait_ns)}}
    finally:
        floor.stop()


def measure_huey(jobs: int, load_seconds: float) -> dict[str, Any]:
    stack = HueyStack(workers=2)
    try:
        from huey.exceptions import ResultTimeout

        from benchmarks.huey_jobs import stamp

        def wait(result: Any, timeout: float) -> int | None:
            if timeout <= 0:
                value = result.get(blocking=False)
                return None if value is None else int(value)
            try:
                return int(result.get(blocking=True, timeout=timeout))
            except ResultTimeout:
                return None

        return measure("huey", stamp, wait, jobs, load_seconds)
    finally:
        stack.stop()


def _cell(figures: dict[str, float]) -> str:
    return f"{figures['p50']:.3f} / {figures['p99']:.3f} / {figures['max']:.1f}"


def targets(summary: dict[str, Any]) -> list[Target]:
    """Issue 21's latency targets judged on ``summary`` (one run, or the medians)."""
    low = summary["ours"]["low_load"]["start"]
    return [
        Target("low-load start p50", low["p50"], TARGET_P50_MS, at_most=True, unit="ms"),
        Target("low-load start p99", low["p99"], TARGET_P99_MS, at_most=True, unit="ms"),
    ]


def run_line(number: int, runs: int, run: dict[str, Any]) -> str:
    """One run's start p50 / p99 (ms) at low load and at half peak, per system."""
    parts = [f"run {number}/{runs}:"]
    for name in ("ours", "huey"):
        if name in run:
            low, half = run[name]["low_load"]["start"], run[name]["half_peak"]["start"]
            parts.append(
                f"{name} start p50/p99 ms: low load {low['p50']:.3f}/{low['p99']:.3f},"
                f" half peak ({run[name]['half_peak']['jobs_per_second']:,.0f}/s)"
                f" {half['p50']:.3f}/{half['p99']:.3f};"
            )
    if "floor" in run:
        floor = run["floor"]["low_load"]["start"]
        parts.append(f"floor start p50/p99 ms: {floor['p50']:.3f}/{floor['p99']:.3f};")
    return " ".join(parts)


def print_table(results: dict[str, Any]) -> None:
    systems = [name for name in ("ours", "huey") if name in results]
    print("\nlatency in ms, p50 / p99 / max")
    print(f"{'':34}" + "".join(f"{name:>28}" for name in systems))
    for run in ("low_load", "half_peak"):
        for kind, label in (("start", ".delay() -> job starts"), ("wait", ".delay() -> .wait()")):
            cells = "".join(f"{_cell(results[s][run][kind]):>28}" for s in systems)
            print(f"{run.replace('_', ' ') + ', ' + label:34}{cells}")
    print(
        f"{'peak jobs/s (reply-requested jobs)':34}"
        + "".join(f"{results[s]['peak']['jobs_per_second']:>28,.0f}" for s in systems)
    )
    print(
        f"{'half peak: jobs/s achieved':34}"
        + "".join(f"{results[s]['half_peak']['jobs_per_second']:>28,.0f}" for s in systems)
    )
    if "floor" in results:
        print_floor(results)
    for target in targets(results):
        print(f"target: {target.line()}")
    if "huey" in results:
        for run in ("low_load", "half_peak"):
            ours = results["ours"][run]["wait"]["p50"]
            theirs = results["huey"][run]["wait"]["p50"]
            print(f"{run.replace('_', ' ')}: Huey's p50 wait / ours = {theirs / ours:.1f}x")


def print_floor(results: dict[str, Any]) -> None:
    """The floor's low-load figures, and how much of ours is above it (p50)."""
    floor = results["floor"]["low_load"]
    ours = results["ours"]["low_load"]
    print(f"{'floor, low load, job starts':34}{_cell(floor['start']):>28}")
    print(f"{'floor, low load, .wait()':34}{_cell(floor['wait']):>28}")
    for kind, label in (("start", "start"), ("wait", ".wait()")):
        above = ours[kind]["p50"] - floor[kind]["p50"]
        print(
            f"ours above the floor, low-load {label} p50: {above:+.3f} ms"
            f" (ours {ours[kind]['p50']:.3f} = floor {floor[kind]['p50']:.3f} + our code)"
        )


def run(jobs: int, load_seconds: float, runs: int = 1, skip_huey: bool = False) -> dict[str, Any]:
    """Ours then Huey (unless skipped or missing), ``runs`` times in turn; every run's
    figures under ``runs`` and their medians (shaped like one run) under ``median``."""
    missing = "skipped" if skip_huey else huey_missing()
    if missing and not skip_huey:
        print(f"Huey + Redis skipped: {missing}", flush=True)
    all_runs: list[dict[str, Any]] = []
    for number in range(1, runs + 1):
        label = f"[{number}/{runs}] " if runs > 1 else ""
        one: dict[str, Any] = {}
        print(f"{label}ours (router + job manager, 2 workers, journal sync full) ...", flush=True)
        one["ours"] = measure_ours(jobs, load_seconds)
        print(f"{label}floor (same hops and disk sync, no logic) ...", flush=True)
        one["floor"] = measure_floor(jobs)
        if not missing:
            print(f"{label}huey (Redis, consumer with 2 process workers) ...", flush=True)
            one["huey"] = measure_huey(jobs, load_seconds)
        all_runs.append(one)
    return {"runs": all_runs, "median": median_of(all_runs)}


def print_report(results: dict[str, Any]) -> None:
    """Every run's line, then the table of the medians (of the one run when there is one)."""
    runs = results["runs"]
    print()
    for number, one in enumerate(runs, 1):
        print(run_line(number, len(runs), one))
    if len(runs) > 1:
        print(f"\nmedian of {len(runs)} runs (each figure's median on its own)")
    print_table(results["median"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000, help="jobs for low load and for peak")
    parser.add_argument(
        "--load-seconds", type=float, default=5.0, help="length of the half-peak run"
    )
    parser.add_argument("--skip-huey", action="store_true", help="measure ours only")
    parser.add_argument("--runs", type=int, default=1, help="ours then Huey, N times; medians")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    options = parser.parse_args(argv)

    if options.runs < 1:
        parser.error("--runs must be at least 1")
    results = run(options.jobs, options.load_seconds, options.runs, options.skip_huey)
    print_report(results)
    write_json(options.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
