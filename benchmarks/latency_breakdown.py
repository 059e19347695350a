"""Where a job's low-load start latency goes: the hops of its path, one by one.

    python benchmarks/latency_breakdown.py              # 2000 jobs one at a time
    python benchmarks/latency_breakdown.py --jobs 500 --skip-floor

Our router and job manager (2 worker processes, journal on, ``sync full``)
run with hooks (``benchmarks/_breakdown_hooks.py``) that write a monotonic
timestamp at each hop; this process sends ``--jobs`` jobs one at a time, as
``latency.py`` does at low load, and matches each job's events by time (one
job is in flight at a time). For each hop it prints the median and p90 in
microseconds, then the floor's start p50 from the same run
(``benchmarks/_floor.py``: the same hops and sync with no logic).

The hops add up to the start latency of each job exactly (each begins where
the one before ended). The hooks cost about 2 us per event, some nine on a
job's way to its start and about seventeen per job in all (the ACK, the
reply and the wake-ups they cause): the total reads above ``latency.py``'s,
and a change that saves a wake-up looks better here than it is (measure it
with ``latency.py``).
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._breakdown_hooks import ENV
from benchmarks._peers import child_pids, start_ours

SITE = Path(__file__).resolve().parent / "_breakdown_site"

#: (hop, what it covers), in path order.
HOPS = (
    ("client .delay()", "the client encodes and sends the job"),
    ("to the router", "loopback TCP and ZeroMQ until the router's poll returns"),
    ("router: read, accept", "the router reads, checks and routes the job"),
    ("router: journal writes", "the INSERT (and other kept writes) before COMMIT"),
    ("router: COMMIT + sync", "SQLite's COMMIT with its fdatasync (and a prune now and then)"),
    ("router: hand-out", "from the commit's return to the job sent to the job manager"),
    ("to the job manager", "loopback TCP and ZeroMQ until its poll returns"),
    ("job manager: pass on", "it reads the job and writes it to an idle worker's pipe"),
    ("to the worker", "the pipe, until the worker has read the job"),
    ("worker: start", "it decodes the job and calls it"),
)

Event = tuple[int, str]


def _load(path: Path) -> list[Event]:
    events = []
    for line in path.read_text().splitlines():
        tag, _, stamp = line.partition(" ")
        events.append((int(stamp), tag))
    return sorted(events)


def _first(events: list[Event], tag: str, after: int, before: int) -> int | None:
    """The first ``tag`` event at or after ``after`` and before ``before``."""
    at = bisect.bisect_left(events, (after, ""))
    while at < len(events) and events[at][0] < before:
        if events[at][1] == tag:
            return events[at][0]
        at += 1
    return None


def split(
    jobs: list[tuple[int, int, int]],
    router: list[Event],
    manager: list[Event],
    workers: list[Event],
) -> list[list[int]]:
    """Per job (``(before .delay(), after .delay(), started)`` in ns), its hops in
    ns (see :data:`HOPS`); jobs whose events do not line up are left out."""
    result = []
    for index, (t0, t1, started) in enumerate(jobs):
        end = jobs[index + 1][0] if index + 1 < len(jobs) else started + 1
        # The router may read the job while .delay() is still returning.
        wake = _first(router, "wake", t0, end)
        c0 = wake and _first(router, "c0", wake, end)
        e0 = c0 and _first(router, "e0", c0, end)
        c1 = e0 and _first(router, "c1", e0, end)
        sent = c1 and _first(router, "send", c1, end)
        woke = sent and _first(manager, "wake", sent, end)
        written = woke and _first(manager, "pipew", woke, end)
        read = written and _first(workers, "piper", written, end)
        points = [t0, t1, wake, c0, e0, c1, sent, woke, written, read, started]
        if any(p is None for p in points):
            continue
        stamps = [int(p) for p in points]  # type: ignore[arg-type]
        # The router may read the job, and even commit it, before .delay() has
        # returned: a hop that began before the one before it ended takes no time.
        for at in range(2, len(stamps)):
            stamps[at] = max(stamps[at], stamps[at - 1])
        result.append([b - a for a, b in itertools.pairwise(stamps)])
    return result


def measure(jobs: int, directory: Path) -> tuple[list[tuple[int, int, int]], dict[str, Any]]:
    """Run ours with the hooks and send ``jobs`` jobs one at a time."""
    from benchmarks._client_compat import close_clients
    from benchmarks.noop_jobs import stamp
    from django_eventmq.runtime import config

    saved = {name: os.environ.get(name) for name in (ENV, "PYTHONPATH")}
    os.environ[ENV] = str(directory)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(SITE), saved["PYTHONPATH"]) if p)
    try:
        stack = start_ours(concurrency=2)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    broker = os.environ.get("EMQ_BROKER_ADDR")
    os.environ["EMQ_BROKER_ADDR"] = stack.frontend
    config.reset()
    sent: list[tuple[int, int, int]] = []
    try:
        for _ in range(min(200, jobs)):  # warm-up: connections, imports, caches
            stamp.delay().wait(timeout=60)
        pids = {
            "router": stack.router.pid,
            "manager": stack.jobmanager.pid,
            "workers": child_pids(stack.jobmanager.pid),
        }
        for _ in range(jobs):
            t0 = time.monotonic_ns()
            handle = stamp.delay()
            t1 = time.monotonic_ns()
            sent.append((t0, t1, int(handle.wait(timeout=60))))
    finally:
        close_clients()
        stack.stop()
        if broker is None:
            os.environ.pop("EMQ_BROKER_ADDR", None)
        else:
            os.environ["EMQ_BROKER_ADDR"] = broker
        config.reset()
    return sent, pids


def breakdown(jobs: int) -> dict[str, Any]:
    """The hops' medians and p90s (us) over ``jobs`` jobs, and how many lined up."""
    with tempfile.TemporaryDirectory(prefix="emq-breakdown-") as name:
        directory = Path(name)
        sent, pids = measure(jobs, directory)

        def events(pid: int) -> list[Event]:
            path = directory / str(pid)
            return _load(path) if path.exists() else []

        workers = sorted(e for pid in pids["workers"] for e in events(pid))
        hops = split(sent, events(pids["router"]), events(pids["manager"]), workers)
    columns = list(zip(*hops, strict=True)) if hops else [() for _ in HOPS]
    table = {}
    for (hop, _), values in zip(HOPS, columns, strict=True):
        ordered = sorted(values)
        table[hop] = {
            "p50": statistics.median(ordered) / 1000 if ordered else float("nan"),
            "p90": ordered[int(0.9 * (len(ordered) - 1))] / 1000 if ordered else float("nan"),
        }
    starts = sorted(sum(job) for job in hops)
    return {
        "jobs": jobs,
        "matched": len(hops),
        "hops": table,
        "start_p50": statistics.median(starts) / 1000 if starts else float("nan"),
        "per_job": hops,
    }


def print_breakdown(result: dict[str, Any], floor_p50: float | None) -> None:
    missing = result["jobs"] - result["matched"]
    print(
        f"\n{result['matched']} of {result['jobs']} jobs lined up"
        f" ({missing} without every hop's event); microseconds per hop"
    )
    print(f"{'hop':28}{'p50':>9}{'p90':>9}  what")
    for hop, what in HOPS:
        figures = result["hops"][hop]
        print(f"{hop:28}{figures['p50']:9.1f}{figures['p90']:9.1f}  {what}")
    print(f"{'start latency, p50':28}{result['start_p50']:9.1f}")
    if floor_p50 is not None:
        print(f"{'the floor, start p50':28}{floor_p50:9.1f}  (latency.py's floor, same run)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000, help="jobs sent one at a time")
    parser.add_argument("--skip-floor", action="store_true", help="do not run the floor")
    options = parser.parse_args(argv)
    if options.jobs < 1:
        parser.error("--jobs must be at least 1")
    print(f"ours with hop timestamps: {options.jobs} jobs one at a time ...", flush=True)
    result = breakdown(options.jobs)
    floor_p50 = None
    if not options.skip_floor:
        from benchmarks.latency import measure_floor

        print("the floor (same hops and disk sync, no logic) ...", flush=True)
        floor_p50 = measure_floor(options.jobs)["low_load"]["start"]["p50"] * 1000
    print_breakdown(result, floor_p50)
    return 0 if result["matched"] else 1


if __name__ == "__main__":
    sys.exit(main())
