"""Where a guaranteed send's time goes: py-spy on the router, the job manager
(and its workers) and the sender while one sender sends guaranteed jobs one
at a time (``durable_peers.py --profile DIR``).

py-spy samples with ``--idle``, so waiting shows too (a poll, an fdatasync):
each frame's samples over the rate and the jobs give microseconds of wall
time per job spent in it, in that process. One sender one at a time leaves
one job in flight, so the router's figures add up along a send's path.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._peers import BIN, Stack
from benchmarks._udp import DoneCounter

#: Samples per second (py-spy's --rate).
RATE = 500


def _spy(pid: int, out: Path, children: bool = False) -> subprocess.Popen[bytes]:
    cmd = [str(BIN / "py-spy"), "record", "--pid", str(pid), "--format", "raw", "-o", str(out)]
    cmd += ["--rate", str(RATE), "--idle", "--nonblocking"]
    if children:
        cmd.append("--subprocesses")
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _one_thread(text: str, name: str) -> str:
    """The stacks of the thread on a send's path: the sending thread in the
    sender, the main thread elsewhere (not ZeroMQ's auth thread, not the
    benchmark's UDP counter, both idle in a poll all along)."""
    if name == "sender":
        return "\n".join(line for line in text.splitlines() if "drive.<locals>.sender" in line)
    return "\n".join(line for line in text.splitlines() if "Thread._bootstrap" not in line)


def profile(jobs: int, directory: Path) -> dict[str, Any]:
    """Send ``jobs`` guaranteed jobs one at a time under py-spy; per process, the
    frames with the most wall time per job (inclusive and self)."""
    from benchmarks import durable_peers
    from benchmarks.throughput import stop_spy, summarize_collapsed

    if not (BIN / "py-spy").exists():
        raise SystemExit(f"--profile: {BIN / 'py-spy'} not found (pip install py-spy)")
    directory.mkdir(parents=True, exist_ok=True)
    counter = DoneCounter()
    outs = {name: directory / f"{name}.raw.txt" for name in ("router", "jobmanager", "sender")}
    try:
        started: list[Stack] = []
        with durable_peers.ours_guaranteed(started) as send:
            durable_peers.warm_up(send, counter, "ours")
            stack = started[0]
            spies = [
                _spy(stack.router.pid, outs["router"]),
                _spy(stack.jobmanager.pid, outs["jobmanager"], children=True),
                _spy(os.getpid(), outs["sender"]),
            ]
            time.sleep(1.0)  # py-spy attaches asynchronously
            try:
                figures = durable_peers.drive(send, counter, jobs, 1)
            finally:
                for spy in spies:
                    stop_spy(spy, 60)
    finally:
        counter.close()
    us_per_job = 1e6 / RATE / jobs
    result: dict[str, Any] = {"jobs": jobs, "run": figures, "processes": {}}
    for name, out in outs.items():
        if not out.exists():
            print(f"py-spy wrote nothing for the {name}", file=sys.stderr)
            continue
        summary = summarize_collapsed(_one_thread(out.read_text(), name), top=20)
        for process, data in summary.items():
            for kind in ("self", "inclusive"):
                data[kind] = [[f, n, round(n * us_per_job, 1)] for f, n, _pct in data[kind]]
            result["processes"][f"{name} [{process}]"] = data
    return result


def print_profile(result: dict[str, Any]) -> None:
    run = result["run"]
    per_send = 1e6 / run["per_second"]
    print(
        f"\nguaranteed, one at a time, under py-spy --idle: {run['per_second']:,.0f} jobs/s,"
        f" {per_send:,.0f} us per send; wall us per job in each frame:"
    )
    for process, data in result["processes"].items():
        print(f"\n== {process}")
        for kind in ("inclusive", "self"):
            print(f"  {kind}:")
            for frame, _n, us in data[kind][:14]:
                print(f"    {us:8.1f} us  {frame}")


def main_thread_only(raw: Path, name: str) -> dict[str, Any]:
    """A raw file's summary as :func:`profile` makes it (for files kept from a run)."""
    from benchmarks.throughput import summarize_collapsed

    return summarize_collapsed(_one_thread(raw.read_text(), name), top=30)
