"""Soak: our router and job manager under a steady load for minutes, watched.

    python benchmarks/soak.py                          # 240 s at 3,000 jobs/s
    python benchmarks/soak.py --seconds 600 --rate 5000 --every 30

Timeouts, heartbeats, leases and slow leaks only show after minutes. This
sends ``--rate`` no-op jobs a second (paced by the clock, from this process)
to a router and one job manager with 2 workers (the defaults: journal on,
``JOURNAL_SYNC=full``) for ``--seconds``, and every ``--every`` seconds prints
a line: jobs sent and processed so far, the backlog, the router's and the job
manager's resident memory (RSS) and CPU share. At the end it waits for every
job to be processed and prints the peaks and every WARNING, ERROR or
CRITICAL line the two processes logged. It exits 1 when a job was not
processed or something was logged at those levels, so a script can run it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._peers import Stack, cpu_seconds, rss_mib, start_ours, wait_until

_LOUD = re.compile(r"\b(WARNING|ERROR|CRITICAL)\b")


def loud_lines(stack: Stack) -> list[str]:
    """The WARNING/ERROR/CRITICAL lines the router and the job manager logged."""
    lines = []
    for name, proc in (("router", stack.router), ("jobmanager", stack.jobmanager)):
        lines += [f"{name}: {line}" for line in proc.output().splitlines() if _LOUD.search(line)]
    return lines


def soak(seconds: float, rate: float, every: float) -> int:
    from benchmarks._client_compat import close_clients
    from benchmarks.noop_jobs import noop
    from django_eventmq.runtime import config

    stack = start_ours(concurrency=2)
    before = os.environ.get("EMQ_BROKER_ADDR")
    os.environ["EMQ_BROKER_ADDR"] = stack.frontend
    config.reset()
    pids = {"router": stack.router.pid, "jobmanager": stack.jobmanager.pid}
    peak = dict.fromkeys(pids, 0.0)
    try:
        base = stack.admin.processed()
        print(
            f"soak: {seconds:.0f} s at {rate:,.0f} jobs/s, a line every {every:.0f} s",
            flush=True,
        )
        print(
            f"{'s':>6} {'sent':>10} {'processed':>10} {'backlog':>8}"
            f" {'router MiB':>11} {'jm MiB':>7} {'router CPU':>11} {'jm CPU':>7}",
            flush=True,
        )
        start = time.monotonic()
        interval = 1.0 / rate
        due = start
        sent = 0
        next_line = start + every
        cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        line_at = start
        while True:
            now = time.monotonic()
            if now - start >= seconds:
                break
            while due <= now:
                noop.delay(sent)
                sent += 1
                due += interval
            if now >= next_line:
                processed = stack.admin.processed() - base
                memory = {name: rss_mib(pid) for name, pid in pids.items()}
                cpu = {name: cpu_seconds(pid) for name, pid in pids.items()}
                share = {n: (cpu[n] - cpu_before[n]) / (now - line_at) * 100 for n in pids}
                cpu_before, line_at = cpu, now
                for name, value in memory.items():
                    peak[name] = max(peak[name], value)
                print(
                    f"{now - start:6.0f} {sent:10,} {processed:10,} {sent - processed:8,}"
                    f" {memory['router']:11.1f} {memory['jobmanager']:7.1f}"
                    f" {share['router']:10.0f}% {share['jobmanager']:6.0f}%",
                    flush=True,
                )
                next_line += every
            time.sleep(max(0.0, min(due, next_line) - time.monotonic()))  # pacing the load
        print(f"sent {sent:,} jobs; waiting for the last ones ...", flush=True)
        with contextlib.suppress(TimeoutError):  # the count below says what is missing
            wait_until(
                lambda: stack.admin.processed() - base >= sent, 120, "every job processed", 0.2
            )
        processed = stack.admin.processed() - base
        for name, pid in pids.items():
            peak[name] = max(peak[name], rss_mib(pid))
        loud = loud_lines(stack)
    finally:
        close_clients()
        stack.stop()
        if before is None:  # as it was: a test process goes on with other tests
            os.environ.pop("EMQ_BROKER_ADDR", None)
        else:
            os.environ["EMQ_BROKER_ADDR"] = before
        config.reset()
    print(
        f"processed {processed:,} of {sent:,}; peak RSS router {peak['router']:.1f} MiB,"
        f" job manager {peak['jobmanager']:.1f} MiB; {len(loud)} warning/error line(s)"
    )
    for line in loud[:50]:
        print("  " + line)
    return 0 if processed == sent and not loud else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=240.0, help="how long to send")
    parser.add_argument("--rate", type=float, default=3000.0, help="jobs sent a second")
    parser.add_argument("--every", type=float, default=15.0, help="seconds between lines")
    options = parser.parse_args(argv)
    if options.seconds <= 0 or options.rate <= 0 or options.every <= 0:
        parser.error("--seconds, --rate and --every must be positive")
    return soak(options.seconds, options.rate, options.every)


if __name__ == "__main__":
    sys.exit(main())
