"""Shards benchmark: durable enqueue rate into one router group vs two, in one run.

    .venv/bin/python benchmarks/shards.py                 # 20,000 jobs, 3 rounds
    .venv/bin/python benchmarks/shards.py --jobs 50000 --repeat 5
    .venv/bin/python benchmarks/shards.py --journal-sync normal   # no WAL flush per commit
    .venv/bin/python benchmarks/shards.py --pg-dsn postgresql://me@db:5432/bench

**durable enqueue jobs/s**: one client in this process sends N jobs with
``send_many`` and ``guarantee`` (each counts once its ACK came, which a router
sends only after the job is committed to its PostgreSQL journal); N / time
until the last ACK. The jobs' queues are ``q0`` ... ``q15`` taken in turn.

- *one group*: one router, the only member of a group of its own
  (``--journal DSN --group G``); ``BROKER_ADDR`` names it; a plain ``Client``.
- *two groups*: two routers, each leading a group of its own (its own
  schema, its own lease), ``BROKER_ADDR="f1;f2"``; the client is a
  ``ShardedClient`` spreading the queues over the groups (``SHARD_BY=queue``:
  8 queues each way, give or take the hash), a pipeline per group with the
  same window each.

Each round measures both, alternating which goes first, on fresh routers and
schemas (dropped at the end); medians are printed with the ratio. The CPU
seconds each part used during the timed sends (this client, the routers,
every PostgreSQL server process) are printed per wall second: on a 2-core
machine, a sum near 2.0 means the cores are what limits the rate, not the
sharding.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._peers import Proc, cpu_seconds, our_command, tcp_addr
from benchmarks.durability import BODY, PG_DSN, Groups, postgres_missing
from django_eventmq.client.pool import connect

QUEUES = [f"q{n}".encode() for n in range(16)]


def postgres_pids() -> list[int]:
    """Every process named ``postgres`` on this machine (the server and its backends)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "postgres":
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@contextmanager
def group_router(dsn: str, groups: Groups, sync: str) -> Iterator[tuple[str, Proc]]:
    """A router leading a group of its own until the block ends: (frontend, process)."""
    frontend, backend, admin = tcp_addr(), tcp_addr(), tcp_addr()
    group = groups.new()
    proc = Proc(
        our_command(
            *("router", "--frontend", frontend, "--backend", backend, "--admin", admin),
            *("--journal", dsn, "--group", group, "--journal-sync", sync),
        ),
        env={"EMQ_HIGH_WATER_MARK": "10000000"},
    )
    try:
        proc.wait_output(r"router ready", 60)
        yield frontend, proc
    finally:
        proc.stop(timeout=60)
        groups.drop(group)


class Measure:
    """One timed send: jobs/s and CPU seconds per wall second of each part."""

    def __init__(self, rate: float, cpu: dict[str, float]) -> None:
        self.rate, self.cpu = rate, cpu


def enqueue(
    dsn: str, groups: Groups, count: int, n: int, window: int, base: int, sync: str
) -> Measure:
    """Start ``count`` group routers, send ``n`` guaranteed jobs over them; the rate."""
    with ExitStack() as stack:
        routers = [stack.enter_context(group_router(dsn, groups, sync)) for _ in range(count)]
        client = connect(";".join(frontend for frontend, _ in routers), send_timeout=30)
        try:

            def send(first: int, number: int) -> None:
                jobs = (
                    (b"s-%d" % i, QUEUES[i % len(QUEUES)], b"guarantee", BODY)
                    for i in range(first, first + number)
                )
                result = client.send_many(jobs, window=window, ack_timeout=30.0)
                if result.acked != number:
                    raise RuntimeError(f"{number - result.acked} of {number} not acknowledged")

            send(base, min(2000, n))  # warm-up: connections, FEATURES, the schemas' caches
            pg = postgres_pids()
            parts = {f"router {i + 1}": proc.pid for i, (_, proc) in enumerate(routers)}
            before = {name: cpu_seconds(pid) for name, pid in parts.items()}
            pg_before = sum(cpu_seconds(pid) for pid in pg)
            own_before = sum(os.times()[:2])
            start = time.perf_counter()
            send(base + 2000, n)
            elapsed = time.perf_counter() - start
            cpu = {"client": (sum(os.times()[:2]) - own_before) / elapsed}
            for name, pid in parts.items():
                cpu[name] = (cpu_seconds(pid) - before[name]) / elapsed
            cpu["postgres"] = (sum(cpu_seconds(pid) for pid in pg) - pg_before) / elapsed
            return Measure(n / elapsed, cpu)
        finally:
            client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--window", type=int, default=2_000, help="per group")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pg-dsn", default=PG_DSN)
    parser.add_argument(
        "--journal-sync",
        choices=("full", "normal"),
        default="full",
        help="full: each commit waits for PostgreSQL's WAL flush; normal: it does not",
    )
    args = parser.parse_args()
    missing = postgres_missing(args.pg_dsn)
    if missing:
        print(f"no PostgreSQL at {args.pg_dsn}: {missing}")
        return 1
    groups = Groups(args.pg_dsn)
    runs: dict[int, list[Measure]] = {1: [], 2: []}
    print(f"load average before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores")
    base = 0
    try:
        for number in range(args.repeat):
            order = (1, 2) if number % 2 == 0 else (2, 1)
            for count in order:
                base += args.jobs + 2000
                m = enqueue(
                    args.pg_dsn, groups, count, args.jobs, args.window, base, args.journal_sync
                )
                runs[count].append(m)
                parts = ", ".join(f"{k} {v:.2f}" for k, v in m.cpu.items())
                print(
                    f"round {number + 1}: {count} group(s): {m.rate:,.0f} jobs/s "
                    f"(CPU s per s: {parts}; sum {sum(m.cpu.values()):.2f})",
                    flush=True,
                )
    finally:
        groups.drop_all()
    one = statistics.median(m.rate for m in runs[1])
    two = statistics.median(m.rate for m in runs[2])
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(
        f"durable enqueue (JOURNAL_SYNC={args.journal_sync}), {args.jobs:,} jobs, median of "
        f"{args.repeat}: one group {one:,.0f} "
        f"jobs/s, two groups {two:,.0f} jobs/s, ratio {two / one:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
