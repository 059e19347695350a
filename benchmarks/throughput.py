"""Throughput of django-eventmq against the reference eventmq 0.3.13 and a raw pyzmq ceiling.

    python benchmarks/throughput.py --jobs 20000            # full run
    python benchmarks/throughput.py --quick                 # a short run
    python benchmarks/throughput.py --skip-reference --json out.json
    python benchmarks/throughput.py --profile /tmp/prof     # + where our processes spend CPU

Figures (see benchmarks/README.md): enqueue jobs/s of one client process,
end-to-end jobs/s (first send until the job manager finished all N, seen in
the router's STATUS), for ours, the reference and the raw ceiling, and the
ratios. Everything runs on loopback; each system gets a router (or broker),
one job manager (or two echo workers) with 2 worker processes, one client.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Run as a script: make the checkout importable (django_eventmq, benchmarks).
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._peers import (
    BIN,
    PYTHON,
    Admin,
    Proc,
    Stack,
    run_json,
    start_ours,
    start_reference,
    start_router_only,
    tcp_addr,
    wait_until,
)

#: The issue's targets on a 2-core machine.
TARGET_END_TO_END = 5_000
TARGET_ENQUEUE = 50_000


# -- ours -----------------------------------------------------------------------


def _send_ours(stack: Stack, count: int, start_value: int = 0) -> float:
    """``noop.delay()`` ``count`` times from this process; returns seconds taken."""
    from benchmarks.noop_jobs import noop

    start = time.perf_counter()
    for i in range(start_value, start_value + count):
        noop.delay(i)
    return time.perf_counter() - start


#: Seconds between two STATUS polls while waiting for ours to finish. A STATUS
#: costs the router real work: polled every 5 ms it took 15% of the router's
#: py-spy samples in a 20,000-job run. The reference is polled every 100 ms.
POLL = 0.02


def _wait_processed(stack: Stack, target: int, timeout: float) -> tuple[float, int]:
    """Poll STATUS until ``target`` jobs are processed; returns (perf_counter at that, count)."""
    deadline = time.perf_counter() + timeout
    while True:
        done = stack.admin.processed()
        now = time.perf_counter()
        if done >= target or now > deadline:
            return now, done
        time.sleep(POLL)


def measure_ours(
    jobs: int, warmup: int, profile_dir: Path | None = None, prefetch: int | None = None
) -> dict[str, Any]:
    """Our router + job manager (concurrency 2), our client in this process."""
    from django_eventmq.client.connection import close_clients
    from django_eventmq.runtime import config

    stack = start_ours(concurrency=2, prefetch=prefetch)
    os.environ["EMQ_BROKER_ADDR"] = stack.frontend
    config.reset()
    spies: list[tuple[str, subprocess.Popen[bytes], Path]] = []
    try:
        _send_ours(stack, warmup)
        _, done = _wait_processed(stack, warmup, 60)
        if done < warmup:
            raise RuntimeError(f"warm-up: only {done} of {warmup} jobs finished in 60 s")
        if profile_dir is not None:
            spies = _start_spies(stack, profile_dir)
        base = stack.admin.processed()
        start = time.perf_counter()
        enqueue_s = _send_ours(stack, jobs, warmup)
        finished, done = _wait_processed(stack, base + jobs, max(120.0, jobs / 100))
        end_to_end_s = finished - start
        completed = done - base
    finally:
        close_clients()
        profiles = _stop_spies(spies)
        stack.stop()
    result: dict[str, Any] = {
        "jobs": jobs,
        "prefetch": prefetch,
        "completed": completed,
        "enqueue_seconds": enqueue_s,
        "enqueue_per_second": jobs / enqueue_s,
        "end_to_end_seconds": end_to_end_s,
        "end_to_end_per_second": completed / end_to_end_s,
    }
    if profiles:
        result["profile"] = profiles
    return result


def measure_enqueue(jobs: int) -> dict[str, Any]:
    """One client's enqueue rate into our router alone (durable journal on, no job
    manager draining the queue), so the client and the router each have a core."""
    from django_eventmq.client.connection import close_clients
    from django_eventmq.runtime import config

    router, frontend, admin_addr = start_router_only()
    admin = Admin(admin_addr)
    os.environ["EMQ_BROKER_ADDR"] = frontend
    config.reset()
    try:
        _send_ours_plain(200)
        start = time.perf_counter()
        _send_ours_plain(jobs)
        sent = time.perf_counter()
        queued = wait_until(
            lambda: admin.call("MONITOR").get("queued", 0) >= jobs + 200,
            max(60.0, jobs / 1000),
            "the router to store every job",
        )
        stored = time.perf_counter()
    finally:
        close_clients()
        admin.close()
        router.stop()
    return {
        "jobs": jobs,
        "enqueue_per_second": jobs / (sent - start),
        "stored_per_second": jobs / (stored - start),
        "all_stored": bool(queued),
    }


def _send_ours_plain(count: int) -> None:
    from benchmarks.noop_jobs import noop

    for i in range(count):
        noop.delay(i)


# -- the reference ----------------------------------------------------------------


def measure_reference(jobs: int, cap: float) -> dict[str, Any]:
    """Reference router + job manager (-J 2) + reference client, ``jobs`` or ``cap`` seconds.

    Completion is counted from the router's ``Completed default job`` log lines
    (one per REPLY): its STATUS ``processed`` counts dispatches, not completions.
    """

    def completed(stack: Stack) -> int:
        return stack.router.output().count("Completed default job")

    with tempfile.TemporaryDirectory(prefix="emq-bench-ref-") as tmp:
        stack = start_reference(Path(tmp), concurrency=2)
        env = {"EVENTMQ_CONFIG_FILE": str(Path(tmp) / "eventmq.conf")}
        sender = [PYTHON, "-m", "benchmarks._refsend", "--addr", stack.frontend, "--jobs"]
        try:
            warmup = 10
            run_json([*sender, str(warmup)], 60, env)
            wait_until(lambda: completed(stack) >= warmup, 60, "reference warm-up", 0.1)
            base = completed(stack)
            sent = run_json([*sender, str(jobs)], 120, env)
            deadline = sent["start"] + cap
            while True:
                done = completed(stack) - base
                now = time.time()
                if done >= jobs or now > deadline:
                    break
                time.sleep(0.1)
        finally:
            stack.stop()
    return {
        "jobs": jobs,
        "completed": done,
        "capped": done < jobs,
        "enqueue_seconds": sent["end"] - sent["start"],
        "enqueue_per_second": jobs / (sent["end"] - sent["start"]),
        "end_to_end_seconds": now - sent["start"],
        "end_to_end_per_second": done / (now - sent["start"]),
    }


# -- the ceiling ------------------------------------------------------------------


def _round_trips(jobs: int, window: int, credit: int) -> float:
    """Round trips/s through a raw broker with two echo workers of ``credit`` slots each."""
    frontend, backend = tcp_addr(), tcp_addr()
    role = [PYTHON, "-m", "benchmarks._ceiling"]
    broker = Proc([*role, "broker", frontend, backend])
    workers: list[Proc] = []
    try:
        broker.wait_output("broker ready")
        workers = [Proc([*role, "worker", backend, str(credit)]) for _ in range(2)]
        trips = run_json([*role, "client", frontend, str(jobs), str(window)], 300)
    finally:
        for proc in (*workers, broker):
            proc.stop()
    return float(trips["per_second"])


def measure_ceiling(jobs: int, window: int = 1000) -> dict[str, Any]:
    """Raw pyzmq broker with two echo workers (credit 1 and pipelined); one-way PUSH/PULL."""
    role = [PYTHON, "-m", "benchmarks._ceiling"]
    per_slot = _round_trips(jobs, window, credit=1)
    pipelined = _round_trips(jobs, window, credit=100)
    addr = tcp_addr()
    messages = jobs * 5
    puller = Proc([*role, "pull", addr, str(messages)])
    try:
        puller.wait_output("pull ready")
        pusher = Proc([*role, "push", addr, str(messages)])
        try:
            puller.wait(300)
        finally:
            pusher.stop()
        line = [x for x in puller.output().splitlines() if x.startswith("{")][-1]
        oneway = json.loads(line)
    finally:
        puller.stop()
    return {
        "round_trips": jobs,
        "round_trips_per_second": per_slot,
        "pipelined_round_trips_per_second": pipelined,
        "window": window,
        "push_pull_messages": messages,
        "push_pull_per_second": oneway["per_second"],
    }


# -- profiling (py-spy) ------------------------------------------------------------


def _start_spies(
    stack: Stack, profile_dir: Path
) -> list[tuple[str, subprocess.Popen[bytes], Path]]:
    spy = BIN / "py-spy"
    if not spy.exists():
        print(f"--profile: {spy} not found (pip install py-spy); not profiling", file=sys.stderr)
        return []
    profile_dir.mkdir(parents=True, exist_ok=True)
    spies = []
    for name, proc in (("router", stack.router), ("jobmanager", stack.jobmanager)):
        out = profile_dir / f"{name}.raw.txt"
        cmd = [str(spy), "record", "--pid", str(proc.pid), "--format", "raw", "-o", str(out)]
        cmd += ["--rate", "250", "--nonblocking"]
        if name == "jobmanager":
            cmd.append("--subprocesses")
        spies.append(
            (name, subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), out)
        )
    time.sleep(1.0)  # py-spy attaches asynchronously; let it start sampling
    return spies


def _stop_spies(spies: list[tuple[str, subprocess.Popen[bytes], Path]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, spy, out in spies:
        spy.send_signal(signal.SIGINT)
        try:
            spy.wait(30)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait(5)
        if out.exists():
            result[name] = summarize_collapsed(out.read_text())
            result[name]["file"] = str(out)
    return result


def summarize_collapsed(text: str, top: int = 15) -> dict[str, Any]:
    """Top functions by self and inclusive samples from py-spy's raw (collapsed) output,
    split by process when py-spy recorded subprocesses."""
    by_process: dict[str, tuple[Counter[str], Counter[str], int]] = {}
    for line in text.splitlines():
        stack_text, _, count_text = line.rpartition(" ")
        if not stack_text or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack_text.split(";")
        # With --subprocesses every stack starts with "process PID:cmdline"
        # frames, the parent's first: the last one names the sampled process.
        pids = [f.split(":")[0] for f in frames if f.startswith("process ")]
        frames = [f for f in frames if not f.startswith("process ")]
        process = "main" if len(pids) <= 1 else f"child {pids[-1].split()[-1]}"
        if not frames:
            continue
        own, total, samples = by_process.get(process, (Counter(), Counter(), 0))
        own[frames[-1]] += count
        for frame in set(frames):
            total[frame] += count
        by_process[process] = (own, total, samples + count)
    return {
        process: {
            "samples": samples,
            "self": [[f, n, round(100 * n / samples, 1)] for f, n in own.most_common(top)],
            "inclusive": [[f, n, round(100 * n / samples, 1)] for f, n in total.most_common(top)],
        }
        for process, (own, total, samples) in by_process.items()
    }


# -- report ----------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    import zmq

    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "python": platform.python_version(),
        "pyzmq": zmq.__version__,
        "libzmq": zmq.zmq_version(),
        "platform": platform.platform(),
    }


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if not a or not b else f"{a / b:.2f}x"


def print_table(results: dict[str, Any]) -> None:
    ours, ref, ceil = results.get("ours"), results.get("reference"), results.get("ceiling")

    def get(block: dict[str, Any] | None, key: str) -> float | None:
        return None if block is None else block.get(key)

    alone = results.get("enqueue_router_only")
    rows = [
        ("enqueue jobs/s (1 client)", "enqueue_per_second", None),
        ("end-to-end jobs/s", "end_to_end_per_second", "round_trips_per_second"),
    ]
    print()
    header = f"{'':28}{'ours':>12}{'reference':>12}{'ceiling':>12}{'ours/ref':>10}{'ours/ceil':>10}"
    print(header)
    print("-" * len(header))
    for label, key, ceil_key in rows:
        o, r = get(ours, key), get(ref, key)
        c = get(ceil, ceil_key) if ceil_key else None
        print(
            f"{label:28}{_fmt(o):>12}{_fmt(r):>12}{_fmt(c):>12}{_ratio(o, r):>10}{_ratio(o, c):>10}"
        )
    if alone:
        print(f"{'  enqueue, router only':28}{_fmt(alone['enqueue_per_second']):>12}")
        print(f"{'  stored in the journal':28}{_fmt(alone['stored_per_second']):>12}")
    if ceil:
        pipelined = ceil["pipelined_round_trips_per_second"]
        print(
            f"{'  ceiling, pipelined (credit 100)':28}{'':>24}{_fmt(pipelined):>12}"
            f"{'':>10}{_ratio(get(ours, 'end_to_end_per_second'), pipelined):>10}"
        )
        print(f"{'one-way PUSH/PULL msgs/s':28}{'':>24}{_fmt(ceil['push_pull_per_second']):>12}")
    print()
    if ours:
        e2e = ours["end_to_end_per_second"]
        enq = max(ours["enqueue_per_second"], (alone or {}).get("enqueue_per_second", 0.0))
        e2e_met = "MET" if e2e >= TARGET_END_TO_END else "NOT MET"
        enq_met = "MET" if enq >= TARGET_ENQUEUE else "NOT MET"
        print(
            f"targets: end-to-end >= {TARGET_END_TO_END:,}/s: {e2e_met} ({e2e:,.0f}); "
            f"enqueue >= {TARGET_ENQUEUE:,}/s: {enq_met} ({enq:,.0f})"
        )
        if ours["completed"] < ours["jobs"]:
            print(f"WARNING: ours completed only {ours['completed']} of {ours['jobs']} jobs")
    if ref and ref.get("capped"):
        print(
            f"reference: capped after {ref['end_to_end_seconds']:.0f} s "
            f"({ref['completed']} of {ref['jobs']} jobs)"
        )


def print_profile(profile: dict[str, Any]) -> None:
    for name, per_process in profile.items():
        file = per_process.pop("file", "")
        for process, data in per_process.items():
            print(f"\n== py-spy {name} [{process}]: {data['samples']} samples ({file})")
            print("  self:")
            for frame, _n, pct in data["self"][:12]:
                print(f"    {pct:5.1f}%  {frame}")
            print("  inclusive:")
            for frame, _n, pct in data["inclusive"][:12]:
                print(f"    {pct:5.1f}%  {frame}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs for ours and the ceiling")
    parser.add_argument("--warmup", type=int, default=500, help="jobs sent before measuring")
    parser.add_argument("--ref-jobs", type=int, default=500, help="jobs for the reference")
    parser.add_argument("--ref-cap", type=float, default=30.0, help="seconds cap, reference")
    parser.add_argument("--quick", action="store_true", help="short run: 3000 jobs, 100 for ref")
    parser.add_argument(
        "--prefetch",
        type=int,
        action="append",
        metavar="N",
        help="also measure ours with the job manager's --prefetch N (repeatable)",
    )
    parser.add_argument("--skip-reference", action="store_true")
    parser.add_argument("--skip-ceiling", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument(
        "--profile", type=Path, metavar="DIR", help="run ours again under py-spy, summaries here"
    )
    options = parser.parse_args(argv)
    if options.quick:
        options.jobs, options.warmup, options.ref_jobs = 3000, 300, 100
        options.ref_cap = min(options.ref_cap, 15.0)

    results: dict[str, Any] = {"machine": machine()}
    print(f"machine: {results['machine']}", flush=True)
    print(f"ours: {options.jobs} jobs (warm-up {options.warmup}) ...", flush=True)
    results["ours"] = measure_ours(options.jobs, options.warmup)
    print(f"  {json.dumps(results['ours'])}", flush=True)
    print(f"enqueue into the router alone: {options.jobs} jobs ...", flush=True)
    results["enqueue_router_only"] = measure_enqueue(options.jobs)
    print(f"  {json.dumps(results['enqueue_router_only'])}", flush=True)
    for prefetch in options.prefetch or []:
        print(f"ours with --prefetch {prefetch}: {options.jobs} jobs ...", flush=True)
        results[f"ours_prefetch_{prefetch}"] = measure_ours(
            options.jobs, options.warmup, prefetch=prefetch
        )
        print(f"  {json.dumps(results[f'ours_prefetch_{prefetch}'])}", flush=True)
    if not options.skip_reference:
        print(f"reference: {options.ref_jobs} jobs, cap {options.ref_cap:.0f} s ...", flush=True)
        results["reference"] = measure_reference(options.ref_jobs, options.ref_cap)
        print(f"  {json.dumps(results['reference'])}", flush=True)
    if not options.skip_ceiling:
        print(f"ceiling: {options.jobs} round trips ...", flush=True)
        results["ceiling"] = measure_ceiling(options.jobs)
        print(f"  {json.dumps(results['ceiling'])}", flush=True)
    print_table(results)
    if options.profile:
        print(f"\nprofiling ours with py-spy ({options.jobs} jobs) ...", flush=True)
        profiled = measure_ours(options.jobs, options.warmup, profile_dir=options.profile)
        results["ours_profiled_run"] = {k: v for k, v in profiled.items() if k != "profile"}
        print_profile(profiled.get("profile", {}))
    if options.json:
        options.json.write_text(json.dumps(results, indent=2) + "\n")
        print(f"\nwrote {options.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
