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

The path: the client's ``.delay()``, to the router (until its poll returns),
the router reads, accepts and hands the job out (until its send to the job
manager, told apart from every other send by the hooks), to the job manager,
which passes it on to a worker's pipe, to the worker, which starts it. The
hops add up to the start latency of each job exactly (each begins where the
one before ended).

The journal commit that stores the job runs after its hand-out, in the same
router loop iteration, while the job travels on (its ACK waits for the
commit): it is not on the start path. Its two parts (the writes before
COMMIT, then COMMIT with its sync), from the first commit after the job's
hand-out, are printed on their own lines below the table and not summed.

The hooks cost about 2 us per event, some five on a job's way to its start
(the commit's, recorded in the router meanwhile, do not delay it) and about
fifteen per job in all (the commit, the ACK, the reply and the wake-ups they
cause): the total reads above ``latency.py``'s, and a change that saves a
wake-up looks better here than it is (measure it with ``latency.py``).
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
from typing import Any, NamedTuple

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._breakdown_hooks import ENV
from benchmarks._peers import child_pids, start_ours

SITE = Path(__file__).resolve().parent / "_breakdown_site"

#: (hop, what it covers), in path order: they add up to the start latency.
HOPS = (
    ("client .delay()", "the client encodes and sends the job"),
    ("to the router", "loopback TCP and ZeroMQ until the router's poll returns"),
    ("router: read, accept, hand out", "it reads, checks and routes the job, then sends it out"),
    ("to the job manager", "loopback TCP and ZeroMQ until its poll returns"),
    ("job manager: pass on", "it reads the job and writes it to an idle worker's pipe"),
    ("to the worker", "the pipe, until the worker has read the job"),
    ("worker: start", "it decodes the job and calls it"),
)

#: (part, what it covers) of the journal commit that follows the job's hand-out:
#: off the start path (the job travels on meanwhile), never summed with HOPS.
COMMIT = (
    ("router: journal writes", "the INSERT (and other kept writes) before COMMIT"),
    ("router: COMMIT + sync", "SQLite's COMMIT with its fdatasync (and a prune now and then)"),
)

Event = tuple[int, str]


class Lined(NamedTuple):
    """One job's figures in ns: its hops (see :data:`HOPS`) and, when its events
    were found, the parts of the commit after its hand-out (see :data:`COMMIT`)."""

    hops: list[int]
    commit: list[int] | None


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


def _chain(events: list[tuple[list[Event], str]], after: int, before: int) -> list[int] | None:
    """The stamps of ``events`` (each a process's events and a tag), each the first
    at or after the one before it (the first at or after ``after``), all before
    ``before``; None if one is missing."""
    stamps = []
    for timeline, tag in events:
        found = _first(timeline, tag, after, before)
        if found is None:
            return None
        stamps.append(found)
        after = found
    return stamps


def split(
    jobs: list[tuple[int, int, int]],
    router: list[Event],
    manager: list[Event],
    workers: list[Event],
) -> list[Lined]:
    """Per job (``(before .delay(), after .delay(), started)`` in ns), its hops and
    commit in ns; jobs whose start path's events do not line up are left out."""
    result = []
    for index, (t0, t1, started) in enumerate(jobs):
        # Its events come before the next job's .delay(); the start path's before its
        # start, the commit's maybe after it (the last job's too).
        later = jobs[index + 1][0] if index + 1 < len(jobs) else sys.maxsize
        end = min(later, started + 1)
        # The router may read the job while .delay() is still returning. Its
        # hand-out is the send tagged "hand": an ACK or reply to a client sent
        # meanwhile is a plain "send".
        path = _chain(
            [
                (router, "wake"),
                (router, "hand"),
                (manager, "wake"),
                (manager, "pipew"),
                (workers, "piper"),
            ],
            t0,
            end,
        )
        if path is None:
            continue
        stamps = [t0, t1, *path, started]
        # The router may read the job, and even hand it out, before .delay() has
        # returned: a hop that began before the one before it ended takes no time.
        for at in range(2, len(stamps)):
            stamps[at] = max(stamps[at], stamps[at - 1])
        # The commit that stores the job follows its hand-out (one before it, from
        # an earlier loop iteration, is not the job's).
        commit = _chain([(router, "c0"), (router, "e0"), (router, "c1")], path[1], later)
        result.append(
            Lined(
                [b - a for a, b in itertools.pairwise(stamps)],
                [b - a for a, b in itertools.pairwise(commit)] if commit else None,
            )
        )
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


def _figures(values: list[int]) -> dict[str, float]:
    """Median and p90 in us of ``values`` (ns)."""
    ordered = sorted(values)
    if not ordered:
        return {"p50": float("nan"), "p90": float("nan")}
    return {
        "p50": statistics.median(ordered) / 1000,
        "p90": ordered[int(0.9 * (len(ordered) - 1))] / 1000,
    }


def breakdown(jobs: int) -> dict[str, Any]:
    """The hops' medians and p90s (us) over ``jobs`` jobs, how many lined up, and
    the commit's parts (off the start path) over the jobs whose commit was found."""
    with tempfile.TemporaryDirectory(prefix="emq-breakdown-") as name:
        directory = Path(name)
        sent, pids = measure(jobs, directory)

        def events(pid: int) -> list[Event]:
            path = directory / str(pid)
            return _load(path) if path.exists() else []

        workers = sorted(e for pid in pids["workers"] for e in events(pid))
        lined = split(sent, events(pids["router"]), events(pids["manager"]), workers)
    hops = [job.hops for job in lined]
    commits = [job.commit for job in lined if job.commit is not None]
    return {
        "jobs": jobs,
        "matched": len(hops),
        "hops": {hop: _figures([job[at] for job in hops]) for at, (hop, _) in enumerate(HOPS)},
        "start_p50": _figures([sum(job) for job in hops])["p50"],
        "commit_matched": len(commits),
        "commit": {
            part: _figures([job[at] for job in commits]) for at, (part, _) in enumerate(COMMIT)
        },
        "per_job": hops,
    }


def print_breakdown(result: dict[str, Any], floor_p50: float | None) -> None:
    missing = result["jobs"] - result["matched"]
    print(
        f"\n{result['matched']} of {result['jobs']} jobs lined up"
        f" ({missing} without every hop's event); microseconds per hop"
    )
    print(f"{'hop':32}{'p50':>9}{'p90':>9}  what")
    for hop, what in HOPS:
        figures = result["hops"][hop]
        print(f"{hop:32}{figures['p50']:9.1f}{figures['p90']:9.1f}  {what}")
    print(f"{'start latency, p50':32}{result['start_p50']:9.1f}")
    if floor_p50 is not None:
        print(f"{'the floor, start p50':32}{floor_p50:9.1f}  (latency.py's floor, same run)")
    print(
        f"\noff the start path, not in the sum: the journal commit after each job's"
        f" hand-out (the job travels on meanwhile; its ACK waits for it),"
        f" {result['commit_matched']} of {result['matched']} jobs"
    )
    for part, what in COMMIT:
        figures = result["commit"][part]
        print(f"{part:32}{figures['p50']:9.1f}{figures['p90']:9.1f}  {what}")


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
