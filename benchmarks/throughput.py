"""Throughput of django-eventmq against Huey + Redis, the reference eventmq 0.3.13 and a raw
pyzmq ceiling.

    python benchmarks/throughput.py --jobs 20000            # full run
    python benchmarks/throughput.py --quick                 # a short run
    python benchmarks/throughput.py --runs 5 --latency --skip-reference --skip-ceiling
                                                            # issue 21's report
    python benchmarks/throughput.py --skip-reference --json out.json
    python benchmarks/throughput.py --profile /tmp/prof     # + where our processes spend CPU
    python benchmarks/throughput.py --durable               # issue 32's report (durable_peers.py)

Figures (see benchmarks/README.md): enqueue jobs/s of one client process,
end-to-end jobs/s (first send until the workers finished all N: the router's
STATUS for ours; for Huey an empty queue with both workers blocked in BRPOP), for ours, Huey,
the reference and the raw ceiling, and the ratios; the durable enqueue rate
into our router alone (journal sync full); CPU microseconds per job of each of
our processes. Everything runs on loopback; each system gets a router (or
broker, or Redis), one job manager (or consumer, or two echo workers) with 2
worker processes, one client. ``--runs N`` repeats ours, Huey and the durable
enqueue N times, interleaved, and judges the targets on the medians.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Run as a script: make the checkout importable (django_eventmq, benchmarks).
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._huey import HueyStack, huey_missing
from benchmarks._peers import (
    BIN,
    PYTHON,
    Admin,
    CpuMeter,
    Proc,
    Stack,
    child_pids,
    cmdline,
    run_json,
    start_ours,
    start_reference,
    start_router_only,
    tcp_addr,
    wait_until,
)
from benchmarks._summary import Target, median_of, write_json

#: Issue 21's targets on a 2-core machine: no-op jobs/s end to end with 2 worker
#: processes (journal on, sync full), that over Huey + Redis's in the same run,
#: and jobs/s stored durably (sync full) from one client, router alone.
TARGET_END_TO_END = 20_000
TARGET_HUEY_RATIO = 3.5
TARGET_DURABLE_ENQUEUE = 60_000


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


def _wait_count(count: Callable[[], int], target: int, timeout: float) -> tuple[float, int]:
    """Poll ``count()`` every :data:`POLL` seconds until it reaches ``target`` or
    ``timeout`` has passed; returns (perf_counter at that, the count)."""
    deadline = time.perf_counter() + timeout
    while True:
        done = count()
        now = time.perf_counter()
        if done >= target or now > deadline:
            return now, done
        time.sleep(POLL)


def _wait_processed(stack: Stack, target: int, timeout: float) -> tuple[float, int]:
    """Poll STATUS until ``target`` jobs are processed; returns (perf_counter at that, count)."""
    return _wait_count(stack.admin.processed, target, timeout)


def measure_ours(
    jobs: int, warmup: int, profile_dir: Path | None = None, prefetch: int | None = None
) -> dict[str, Any]:
    """Our router + job manager (concurrency 2), our client in this process."""
    from benchmarks._client_compat import close_clients
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
        pids = {"router": stack.router.pid, "jobmanager": stack.jobmanager.pid}
        workers = []
        for pid in child_pids(stack.jobmanager.pid):
            if "resource_tracker" in cmdline(pid):
                pids["resource tracker"] = pid  # multiprocessing's, idle
            else:
                workers.append(pid)
        pids.update({f"worker {n}": pid for n, pid in enumerate(workers, 1)})
        meter = CpuMeter(pids)
        base = stack.admin.processed()
        meter.start()
        start = time.perf_counter()
        enqueue_s = _send_ours(stack, jobs, warmup)
        finished, done = _wait_processed(stack, base + jobs, max(120.0, jobs / 100))
        cpu = meter.per_job(jobs)
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
        "cpu_us_per_job": cpu,
    }
    if profiles:
        result["profile"] = profiles
    return result


def measure_enqueue(jobs: int) -> dict[str, Any]:
    """One client's enqueue rate into our router alone (durable journal on, no job
    manager draining the queue), so the client and the router each have a core."""
    from benchmarks._client_compat import close_clients
    from django_eventmq.runtime import config

    router, frontend, admin_addr = start_router_only()
    admin = Admin(admin_addr)
    os.environ["EMQ_BROKER_ADDR"] = frontend
    config.reset()
    try:
        _send_ours_plain(200)
        # The CPU a stored job costs the router: a steadier figure than the rate,
        # which moves with whatever else the machine does that second.
        meter = CpuMeter({"router": router.pid})
        meter.start()
        start = time.perf_counter()
        _send_ours_plain(jobs)
        sent = time.perf_counter()
        queued = wait_until(
            lambda: admin.call("MONITOR").get("queued", 0) >= jobs + 200,
            max(60.0, jobs / 1000),
            "the router to store every job",
        )
        stored = time.perf_counter()
        cpu = meter.per_job(jobs)
    finally:
        close_clients()
        admin.close()
        router.stop()
    return {
        "jobs": jobs,
        "enqueue_per_second": jobs / (sent - start),
        "stored_per_second": jobs / (stored - start),
        "all_stored": bool(queued),
        "cpu_us_per_job": cpu,
    }


def _send_ours_plain(count: int) -> None:
    from benchmarks.noop_jobs import noop

    for i in range(count):
        noop.delay(i)


# -- Huey + Redis ------------------------------------------------------------------


def measure_huey(jobs: int, warmup: int) -> dict[str, Any]:
    """Huey's consumer (2 process workers) on a Redis of its own, Huey's client in
    this process: ``jobs`` no-op jobs; the end is seen every :data:`POLL` seconds as
    an empty queue with both workers blocked waiting for the next job."""
    workers = 2
    stack = HueyStack(workers=workers)
    try:
        from benchmarks import huey_jobs

        def ran(sent: int) -> Callable[[], int]:
            # All ``sent`` once idle; before that, at most those no longer queued but one.
            def count() -> int:
                if huey_jobs.workers_idle(workers):
                    return sent
                return min(sent - 1, sent - huey_jobs.queued())

            return count

        for _ in range(warmup):
            huey_jobs.noop()
        _, done = _wait_count(ran(warmup), warmup, 60)
        if done < warmup:
            raise RuntimeError(f"Huey warm-up: only {done} of {warmup} jobs finished in 60 s")
        assert stack.consumer is not None
        pids = {"redis": stack.redis.pid, "consumer": stack.consumer.pid}
        # The consumer forks its scheduler first, then its workers.
        children = child_pids(stack.consumer.pid)
        if len(children) == 3:
            pids["scheduler"] = children.pop(0)
        pids.update({f"worker {n}": pid for n, pid in enumerate(children, 1)})
        meter = CpuMeter(pids)
        meter.start()
        start = time.perf_counter()
        for _ in range(jobs):
            huey_jobs.noop()
        enqueue_s = time.perf_counter() - start
        finished, completed = _wait_count(ran(jobs), jobs, max(120.0, jobs / 100))
        cpu = meter.per_job(jobs)
    finally:
        stack.stop()
    return {
        "jobs": jobs,
        "completed": completed,
        "enqueue_seconds": enqueue_s,
        "enqueue_per_second": jobs / enqueue_s,
        "end_to_end_seconds": finished - start,
        "end_to_end_per_second": completed / (finished - start),
        "cpu_us_per_job": cpu,
    }


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


def stop_spy(spy: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """Stop a ``py-spy record`` (SIGINT: it writes its file), killing it if it hangs."""
    spy.send_signal(signal.SIGINT)
    try:
        spy.wait(timeout)
    except subprocess.TimeoutExpired:
        spy.kill()
        spy.wait(5)


def _stop_spies(spies: list[tuple[str, subprocess.Popen[bytes], Path]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, spy, out in spies:
        stop_spy(spy)
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


def _get(block: dict[str, Any] | None, key: str) -> float | None:
    return None if block is None else block.get(key)


def huey_ratio(run: dict[str, Any]) -> float | None:
    """Ours over Huey's end-to-end jobs/s in one run (None without both)."""
    ours = _get(run.get("ours"), "end_to_end_per_second")
    huey = _get(run.get("huey"), "end_to_end_per_second")
    return ours / huey if ours and huey else None


def targets(summary: dict[str, Any]) -> list[Target]:
    """Issue 21's throughput targets judged on ``summary`` (one run, or the medians)."""
    return [
        Target(
            "end to end, 2 workers, journal sync full",
            _get(summary.get("ours"), "end_to_end_per_second"),
            TARGET_END_TO_END,
            unit="/s",
        ),
        Target(
            "end to end over Huey + Redis's, same run",
            summary.get("ours_over_huey"),
            TARGET_HUEY_RATIO,
            unit="x",
        ),
        Target(
            "durable enqueue, 1 client, journal sync full",
            _get(summary.get("enqueue_router_only"), "stored_per_second"),
            TARGET_DURABLE_ENQUEUE,
            unit="/s",
        ),
    ]


def run_line(number: int, runs: int, run: dict[str, Any]) -> str:
    """One run's figures on one line."""
    ours, huey, alone = run.get("ours"), run.get("huey"), run.get("enqueue_router_only")
    parts = [f"run {number}/{runs}:"]
    if ours:
        parts.append(
            f"ours e2e {_fmt(ours['end_to_end_per_second'])}/s"
            f" (enqueue {_fmt(ours['enqueue_per_second'])}/s,"
            f" {ours['cpu_us_per_job']['total']:.1f} us CPU/job)"
        )
    if huey:
        parts.append(
            f"| huey e2e {_fmt(huey['end_to_end_per_second'])}/s"
            f" (enqueue {_fmt(huey['enqueue_per_second'])}/s)"
        )
        ratio = huey_ratio(run)
        parts.append(f"| ours/huey {'-' if ratio is None else f'{ratio:.2f}x'}")
    if alone:
        parts.append(
            f"| durable enqueue {_fmt(alone['stored_per_second'])}/s"
            f" (sent {_fmt(alone['enqueue_per_second'])}/s"
            + (
                f", router {alone['cpu_us_per_job']['router']:.1f} us CPU/job)"
                if "cpu_us_per_job" in alone
                else ")"
            )
        )
    return " ".join(parts)


def print_table(results: dict[str, Any]) -> None:
    """The figures (medians when there were several runs), the CPU per job, the targets."""
    ours, huey = results.get("ours"), results.get("huey")
    ref, ceil = results.get("reference"), results.get("ceiling")
    runs = len(results.get("runs", [])) or 1
    alone = results.get("enqueue_router_only")
    rows = [
        ("enqueue jobs/s (1 client)", "enqueue_per_second", None),
        ("end-to-end jobs/s", "end_to_end_per_second", "round_trips_per_second"),
    ]
    print()
    if runs > 1:
        once = " and ".join(name for name in ("reference", "ceiling") if results.get(name))
        print(
            f"median of {runs} runs (ours, huey, durable enqueue; ours/huey end to end:"
            " the median of each run's ratio)" + (f"; {once}: 1 run" if once else "")
        )
    header = (
        f"{'':28}{'ours':>10}{'huey':>10}{'reference':>11}{'ceiling':>10}"
        f"{'ours/huey':>11}{'ours/ref':>10}{'ours/ceil':>10}"
    )
    print(header)
    print("-" * len(header))
    for label, key, ceil_key in rows:
        o, h, r = _get(ours, key), _get(huey, key), _get(ref, key)
        c = _get(ceil, ceil_key) if ceil_key else None
        # The ratio to Huey is the median of each run's ratio (same run, same machine state).
        oh = results.get("ours_over_huey") if key == "end_to_end_per_second" else None
        print(
            f"{label:28}{_fmt(o):>10}{_fmt(h):>10}{_fmt(r):>11}{_fmt(c):>10}"
            f"{(f'{oh:.2f}x' if oh else _ratio(o, h)):>11}{_ratio(o, r):>10}{_ratio(o, c):>10}"
        )
    if alone:
        print(f"{'  enqueue, router only':28}{_fmt(alone['enqueue_per_second']):>10}")
        stored, huey_enq = alone["stored_per_second"], _get(huey, "enqueue_per_second")
        print(
            f"{'  durable (stored, sync full)':28}{_fmt(stored):>10}{_fmt(huey_enq):>10}"
            f"{'':>21}{_ratio(stored, huey_enq):>11}"
        )
        if huey:
            print("  (Huey's enqueue beside it is acknowledged in Redis's memory, persistence off)")
        if "cpu_us_per_job" in alone:
            cpu = alone["cpu_us_per_job"]
            print(
                f"  durable: router {cpu['router']:.1f} us CPU per stored job"
                f" (client {cpu['client']:.1f})"
            )
    if ceil:
        pipelined = ceil["pipelined_round_trips_per_second"]
        print(
            f"{'  pipelined (credit 100)':28}{'':>31}{_fmt(pipelined):>10}"
            f"{'':>21}{_ratio(_get(ours, 'end_to_end_per_second'), pipelined):>10}"
        )
        print(f"{'one-way PUSH/PULL msgs/s':28}{'':>31}{_fmt(ceil['push_pull_per_second']):>10}")
    for name, block in (("ours", ours), ("huey", huey)):
        if block and block.get("cpu_us_per_job"):
            cells = ", ".join(f"{k} {v:.1f}" for k, v in block["cpu_us_per_job"].items())
            print(f"CPU us/job, {name}: {cells}")
    print()
    print("targets (issue 21):")
    for target in targets(results):
        print(f"  {target.line()}")
    if ours and ours["completed"] < ours["jobs"]:
        print(f"WARNING: ours completed only {ours['completed']} of {ours['jobs']} jobs")
    if huey and huey["completed"] < huey["jobs"]:
        print(f"WARNING: huey completed only {huey['completed']} of {huey['jobs']} jobs")
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
    args = sys.argv[1:] if argv is None else argv
    if "--durable" in args:
        # Issue 32's report: durable peers, latency, the floor (benchmarks/durable_peers.py).
        from benchmarks import durable_peers

        return durable_peers.main([a for a in args if a != "--durable"])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs for ours and the ceiling")
    parser.add_argument("--warmup", type=int, default=500, help="jobs sent before measuring")
    parser.add_argument(
        "--durable-jobs",
        type=int,
        help="jobs for the durable enqueue (default: --jobs; more give a steadier router CPU)",
    )
    parser.add_argument("--ref-jobs", type=int, default=500, help="jobs for the reference")
    parser.add_argument("--ref-cap", type=float, default=30.0, help="seconds cap, reference")
    parser.add_argument("--quick", action="store_true", help="short run: 3000 jobs, 100 for ref")
    parser.add_argument(
        "--runs",
        type=int,
        default=1,
        metavar="N",
        help="measure ours, Huey and the durable enqueue N times, interleaved; medians judged",
    )
    parser.add_argument(
        "--prefetch",
        type=int,
        action="append",
        metavar="N",
        help="also measure ours with the job manager's --prefetch N (repeatable)",
    )
    parser.add_argument("--skip-huey", action="store_true")
    parser.add_argument("--skip-reference", action="store_true")
    parser.add_argument("--skip-ceiling", action="store_true")
    parser.add_argument(
        "--latency",
        action="store_true",
        help="then run benchmarks/latency.py (ours and Huey, same --runs) and judge all targets",
    )
    parser.add_argument("--latency-jobs", type=int, default=2000, help="latency.py --jobs")
    parser.add_argument(
        "--latency-load-seconds", type=float, default=5.0, help="latency.py --load-seconds"
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument(
        "--profile", type=Path, metavar="DIR", help="run ours again under py-spy, summaries here"
    )
    options = parser.parse_args(args)
    if options.quick:
        options.jobs, options.warmup, options.ref_jobs = 3000, 300, 100
        options.ref_cap = min(options.ref_cap, 15.0)
        options.latency_jobs, options.latency_load_seconds = 300, 1.0
    if options.runs < 1:
        parser.error("--runs must be at least 1")
    if options.durable_jobs is not None and options.durable_jobs < 1:
        parser.error("--durable-jobs must be at least 1")

    results: dict[str, Any] = {"machine": machine()}
    print(f"machine: {results['machine']}", flush=True)
    sync = os.environ.get("EMQ_JOURNAL_SYNC", "full")
    if sync != "full":
        print(f"WARNING: EMQ_JOURNAL_SYNC={sync}: the targets are for sync full", flush=True)
    missing = "--skip-huey given" if options.skip_huey else huey_missing()
    if missing:
        print(f"Huey + Redis skipped: {missing}", flush=True)
    runs: list[dict[str, Any]] = []
    for number in range(1, options.runs + 1):
        run: dict[str, Any] = {}
        label = f"[{number}/{options.runs}] " if options.runs > 1 else ""
        print(f"{label}ours: {options.jobs} jobs (warm-up {options.warmup}) ...", flush=True)
        run["ours"] = measure_ours(options.jobs, options.warmup)
        print(f"  {json.dumps(run['ours'])}", flush=True)
        if not missing:
            print(f"{label}huey + redis: {options.jobs} jobs ...", flush=True)
            run["huey"] = measure_huey(options.jobs, options.warmup)
            print(f"  {json.dumps(run['huey'])}", flush=True)
            run["ours_over_huey"] = huey_ratio(run)
        durable = options.durable_jobs or options.jobs
        print(f"{label}durable enqueue into the router alone: {durable} jobs ...", flush=True)
        run["enqueue_router_only"] = measure_enqueue(durable)
        print(f"  {json.dumps(run['enqueue_router_only'])}", flush=True)
        runs.append(run)
    results["runs"] = runs
    results.update(median_of(runs))
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
    print()
    for number, run in enumerate(runs, 1):
        print(run_line(number, len(runs), run))
    print_table(results)
    verdicts = targets(results)
    if options.latency:
        from benchmarks import latency

        print(f"\nlatency: {options.runs} run(s), {options.latency_jobs} jobs ...", flush=True)
        results["latency"] = latency.run(
            options.latency_jobs,
            options.latency_load_seconds,
            options.runs,
            skip_huey=bool(missing),
        )
        latency.print_report(results["latency"])
        verdicts += latency.targets(results["latency"]["median"])
        print(f"\nissue 21, all targets (medians of {options.runs} run(s)):")
        for target in verdicts:
            print(f"  {target.line()}")
    if options.profile:
        print(f"\nprofiling ours with py-spy ({options.jobs} jobs) ...", flush=True)
        profiled = measure_ours(options.jobs, options.warmup, profile_dir=options.profile)
        results["ours_profiled_run"] = {k: v for k, v in profiled.items() if k != "profile"}
        print_profile(profiled.get("profile", {}))
    results["targets"] = [
        {"label": t.label, "value": t.value, "goal": t.goal, "verdict": t.verdict} for t in verdicts
    ]
    write_json(options.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
