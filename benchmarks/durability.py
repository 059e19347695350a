"""Durability benchmark: durable enqueue rate, and end-to-end throughput with the
router's journal on versus off, in one run.

    /tmp/venv/bin/python benchmarks/durability.py             # 50,000 / 20,000 jobs
    /tmp/venv/bin/python benchmarks/durability.py --quick     # 10,000 / 3,000 jobs
    /tmp/venv/bin/python benchmarks/durability.py --json out.json

**durable enqueue jobs/s**: one client in this process - our own
``Client.send_many`` with ``guarantee``, the pipelined guaranteed send users
get: each REQUEST counts once its ACK came, which the router sends only after
the job is in the journal, and one not acknowledged in time is resent with
its msgid - against a router with no job manager; up to ``--window``
unacknowledged; N / time until the last ACK. Measured with
``JOURNAL_SYNC=full`` (fsync per group commit), ``normal``, and the journal
off.

**end-to-end jobs/s**: router + one job manager (``--concurrency 2``, job
``benchmarks.noop_jobs.noop``); the same client sends N jobs (the same
guaranteed send, headers without ``guarantee``); from the first send until
the router's STATUS ``processed_messages_by_queue`` has grown by N. Journal
on (``full``) and off, in the same run.

Everything runs on 127.0.0.1 with random ports; each process is stopped at
the end. The machine is shared: compare figures of the same run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._peers import Admin, Proc, our_command, tcp_addr, wait_until
from django_eventmq.client.connection import Client

V = b"eMQP/1.0"
BODY = json.dumps(
    ["run", {"path": "benchmarks.noop_jobs", "callable": "noop", "args": [], "kwargs": {}}]
).encode()


class Producer:
    """Our client (``django_eventmq.client.connection.Client``) sending with ``guarantee``:
    its pipelined bulk send, ``Client.send_many``, which is what a user's code gets."""

    def __init__(self, frontend: str) -> None:
        self.client = Client(frontend)
        self.sent = 0

    def enqueue(self, n: int, window: int, headers: bytes = b"guarantee") -> float:
        """Send n REQUESTs, at most ``window`` unacknowledged; seconds until the last ACK."""
        first = self.sent
        self.sent += n
        start = time.perf_counter()
        result = self.client.send_many(
            ((b"b-%d" % i, b"default", headers, BODY) for i in range(first, first + n)),
            window=window,
            ack_timeout=30.0,
        )
        elapsed = time.perf_counter() - start
        if result.acked != n:
            raise RuntimeError(f"{n - result.acked} of {n} jobs not acknowledged")
        return elapsed

    def close(self) -> None:
        self.client.close()


@contextmanager
def router(journal: str | None, sync: str = "full") -> Iterator[tuple[str, str, str]]:
    frontend, backend, admin = tcp_addr(), tcp_addr(), tcp_addr()
    env = {"EMQ_HIGH_WATER_MARK": "10000000", "EMQ_JOURNAL_SYNC": sync}
    if journal is None:
        env["EMQ_JOURNAL"] = "false"
    else:
        env["EMQ_JOURNAL_PATH"] = journal
    proc = Proc(
        our_command("router", "--frontend", frontend, "--backend", backend, "--admin", admin),
        env=env,
    )
    try:
        proc.wait_output(r"router ready", 30)
        yield frontend, backend, admin
    finally:
        proc.stop()


def durable_enqueue(n: int, window: int, journal: str | None, sync: str) -> float:
    with router(journal, sync) as (frontend, _backend, _admin):
        client = Producer(frontend)
        try:
            client.enqueue(min(2000, n), window)  # warm-up
            return n / client.enqueue(n, window)
        finally:
            client.close()


def end_to_end(n: int, window: int, journal: str | None, concurrency: int = 2) -> float:
    with router(journal) as (frontend, backend, admin_addr):
        jobmanager = Proc(
            our_command(
                "jobmanager",
                "--broker",
                backend,
                "--concurrency",
                str(concurrency),
                "--job-module",
                "benchmarks.noop_jobs",
            )
        )
        admin = Admin(admin_addr)
        client = Producer(frontend)
        try:
            wait_until(lambda: admin.free_slots() >= concurrency, 60, "READY from the workers")
            warmup = min(500, n)
            client.enqueue(warmup, window, headers=b"")
            wait_until(lambda: admin.processed() >= warmup, 60, "the warm-up jobs")
            before = admin.processed()
            start = time.perf_counter()
            client.enqueue(n, window, headers=b"")
            wait_until(lambda: admin.processed() - before >= n, 600, "every job", poll=0.005)
            return n / (time.perf_counter() - start)
        finally:
            client.close()
            admin.close()
            jobmanager.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=50_000, help="jobs for the enqueue rate")
    parser.add_argument("--e2e-jobs", type=int, default=20_000, help="jobs end to end")
    parser.add_argument("--window", type=int, default=2_000, help="unacknowledged REQUESTs")
    parser.add_argument("--quick", action="store_true", help="10,000 / 3,000 jobs")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.e2e_jobs = 10_000, 3_000
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="emq-durability-") as tmp:
        for name, journal, sync in (
            ("enqueue_journal_full", f"{tmp}/full.sqlite3", "full"),
            ("enqueue_journal_normal", f"{tmp}/normal.sqlite3", "normal"),
            ("enqueue_no_journal", None, "full"),
        ):
            results[name] = durable_enqueue(args.jobs, args.window, journal, sync)
        results["e2e_journal_full"] = end_to_end(args.e2e_jobs, args.window, f"{tmp}/e2e.sqlite3")
        results["e2e_no_journal"] = end_to_end(args.e2e_jobs, args.window, None)
    width = max(map(len, results))
    print(f"durable enqueue: {args.jobs} jobs, window {args.window}; e2e: {args.e2e_jobs} jobs")
    for name, value in results.items():
        print(f"  {name:<{width}}  {value:>10,.0f} jobs/s")
    enqueue = results["enqueue_journal_full"]
    print(
        f"target durable enqueue >= 30,000/s: {'met' if enqueue >= 30_000 else 'NOT MET'} "
        f"({enqueue:,.0f}); e2e journal on/off: "
        f"{results['e2e_journal_full'] / results['e2e_no_journal']:.2f}"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
