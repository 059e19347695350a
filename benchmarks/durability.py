"""Durability benchmark: durable enqueue rate and end-to-end throughput with the
router's journal in SQLite, in PostgreSQL (a router group's journal) and off,
in one run.

    .venv/bin/python benchmarks/durability.py              # 50,000 / 20,000 jobs, once
    .venv/bin/python benchmarks/durability.py --repeat 5   # medians of 5 interleaved runs
    .venv/bin/python benchmarks/durability.py --quick      # 10,000 / 3,000 jobs
    .venv/bin/python benchmarks/durability.py --skip-postgres --json out.json
    .venv/bin/python benchmarks/durability.py --pg-dsn postgresql://me@db:5432/bench
    .venv/bin/python benchmarks/durability.py --profile /tmp/prof   # + cProfile of the routers

**durable enqueue jobs/s**: one client in this process - our own
``Client.send_many`` with ``guarantee``, the pipelined guaranteed send users
get: each REQUEST counts once its ACK came, which the router sends only after
the job is in the journal, and one not acknowledged in time is resent with
its msgid - against a router with no job manager; up to ``--window``
unacknowledged; N / time until the last ACK. Measured with the SQLite
journal (``JOURNAL_SYNC=full``: fsync per group commit, and ``normal``), the
PostgreSQL journal (``full``: ``synchronous_commit = on``; the router runs as
the only member of a group of its own, ``--journal URL --group G``), and the
journal off.

**end-to-end jobs/s**: router + one job manager (``--concurrency 2``, job
``benchmarks.noop_jobs.noop``); the same client sends N jobs (the same
guaranteed send, headers without ``guarantee``); from the first send until
the router's STATUS ``processed_messages_by_queue`` (asked every ``--poll``
seconds, 5 ms by default) has grown by N. SQLite journal (``full``),
PostgreSQL journal (``full``) and journal off. Each STATUS makes the
PostgreSQL journal write what it kept and answer a query (a round trip to
the server), which SQLite does in process: a shorter poll costs PostgreSQL
more.

With ``--repeat N`` every figure is measured N times, the kinds interleaved
within each round (SQLite and PostgreSQL alternate which goes first), so that
a busy moment of the shared machine hits both; the medians are reported, with
the load average before and after. Target: PostgreSQL keeps at least half of
SQLite's durable enqueue rate. Without a PostgreSQL server at ``--pg-dsn``
(or with ``--skip-postgres``) its part is skipped with one line. Every group
schema (``emq_<group>``) the run made is dropped at its end.

Everything runs on 127.0.0.1 with random ports; each process is stopped at
the end. The machine is shared: compare figures of the same run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._peers import PYTHON, Admin, Proc, our_command, tcp_addr, wait_until
from django_eventmq.client.connection import Client

V = b"eMQP/1.0"
BODY = json.dumps(
    ["run", {"path": "benchmarks.noop_jobs", "callable": "noop", "args": [], "kwargs": {}}]
).encode()
PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
#: PostgreSQL's durable enqueue must keep at least this share of SQLite's.
PG_TARGET = 0.5
#: The functions a router profile lists by inclusive time (its loop, the journals, psycopg).
LOOP_CALLS = r"django_eventmq/router/(router|frontend|book|journal)|psycopg/(connection|cursor)"


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


@dataclass(frozen=True)
class Store:
    """Where a benchmark router keeps its jobs: ``kind`` sqlite, postgresql or none."""

    kind: str
    sync: str = "full"
    path: str = ""  # the SQLite file, or the PostgreSQL DSN

    def options(self, group: str) -> list[str]:
        if self.kind == "postgresql":
            return ["--journal", self.path, "--group", group]
        if self.kind == "sqlite":
            return ["--journal", self.path]
        return ["--no-journal"]


class Groups:
    """The PostgreSQL groups a run made, one per router, each schema dropped after it."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.made: list[str] = []

    def new(self) -> str:
        group = "bench_" + uuid.uuid4().hex[:12]
        self.made.append(group)
        return group

    def drop(self, group: str) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "emq_{group}" CASCADE')
        if group in self.made:
            self.made.remove(group)

    def drop_all(self) -> None:
        for group in list(self.made):
            self.drop(group)


def postgres_missing(dsn: str) -> str | None:
    """Why no PostgreSQL answers at ``dsn`` (None when one does)."""
    try:
        import psycopg
    except ImportError as exc:
        return f"psycopg is not installed ({exc}); pip install -e '.[postgresql]'"
    try:
        with psycopg.connect(dsn, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


@contextmanager
def router(
    store: Store, groups: Groups | None, profile: Path | None = None
) -> Iterator[tuple[str, str, str]]:
    """A router on ``store`` until the block ends; ``profile``: run it under cProfile,
    its stats written there when it stops."""
    frontend, backend, admin = tcp_addr(), tcp_addr(), tcp_addr()
    env = {"EMQ_HIGH_WATER_MARK": "10000000"}
    group = ""
    if store.kind == "postgresql":
        assert groups is not None
        group = groups.new()
    args = [
        *("router", "--frontend", frontend, "--backend", backend, "--admin", admin),
        *store.options(group),
        *("--journal-sync", store.sync),
    ]
    if profile is None:
        command = our_command(*args)
    else:
        command = [PYTHON, "-m", "cProfile", "-o", str(profile), "-m", "django_eventmq", *args]
    proc = Proc(command, env=env)
    try:
        proc.wait_output(r"router ready", 60)
        yield frontend, backend, admin
    finally:
        proc.stop(timeout=60)
        if group:
            assert groups is not None
            groups.drop(group)


def durable_enqueue(
    n: int, window: int, store: Store, groups: Groups | None, profile: Path | None = None
) -> float:
    with router(store, groups, profile) as (frontend, _backend, _admin):
        client = Producer(frontend)
        try:
            client.enqueue(min(2000, n), window)  # warm-up
            return n / client.enqueue(n, window)
        finally:
            client.close()


def end_to_end(
    n: int,
    window: int,
    store: Store,
    groups: Groups | None,
    profile: Path | None = None,
    concurrency: int = 2,
    poll: float = 0.005,
) -> float:
    with router(store, groups, profile) as (frontend, backend, admin_addr):
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
            wait_until(lambda: admin.processed() - before >= n, 600, "every job", poll=poll)
            return n / (time.perf_counter() - start)
        finally:
            client.close()
            admin.close()
            jobmanager.stop()


def load() -> str:
    """The load averages (1, 5, 15 min), as ``uptime`` prints them."""
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


class Rounds:
    """The measurements of one round, in the order run; odd rounds run PostgreSQL
    before SQLite. ``groups``: the PostgreSQL groups made (None without PostgreSQL)."""

    def __init__(self, args: argparse.Namespace, tmp: str, pg: bool) -> None:
        self.args, self.tmp, self.pg = args, tmp, pg
        self.groups = Groups(args.pg_dsn) if pg else None

    def run(self, number: int) -> list[tuple[str, float]]:
        """(figure name, jobs/s) of round ``number``."""
        args = self.args

        def sqlite(name: str, sync: str = "full") -> Store:
            return Store("sqlite", sync, f"{self.tmp}/{name}-{number}.sqlite3")

        postgres = Store("postgresql", "full", args.pg_dsn)
        enqueue: list[tuple[str, Store]] = [("enqueue_sqlite_full", sqlite("full"))]
        e2e: list[tuple[str, Store]] = [("e2e_sqlite_full", sqlite("e2e"))]
        if self.pg:
            enqueue.append(("enqueue_postgresql_full", postgres))
            e2e.append(("e2e_postgresql_full", postgres))
            if number % 2:
                enqueue.reverse()
                e2e.reverse()
        enqueue += [
            ("enqueue_sqlite_normal", sqlite("normal", "normal")),
            ("enqueue_no_journal", Store("none")),
        ]
        e2e.append(("e2e_no_journal", Store("none")))
        figures = [
            (name, durable_enqueue(args.jobs, args.window, store, self.groups))
            for name, store in enqueue
        ]
        figures += [
            (name, end_to_end(args.e2e_jobs, args.window, store, self.groups, poll=args.poll))
            for name, store in e2e
        ]
        return figures

    def close(self) -> None:
        """Drop every group schema left (a round that failed halfway)."""
        if self.groups is not None:
            self.groups.drop_all()


def profile_routers(args: argparse.Namespace, tmp: str, pg: bool, out: Path) -> None:
    """Durable enqueue and end to end once more per journal with the router under
    cProfile; print the functions that took most of its time (the stats files stay
    in ``out``)."""
    out.mkdir(parents=True, exist_ok=True)
    groups = Groups(args.pg_dsn) if pg else None
    kinds = ["sqlite", "postgresql"] if pg else ["sqlite"]
    try:
        for name, (figure, measure) in itertools.product(
            kinds, (("enqueue", durable_enqueue), ("e2e", end_to_end))
        ):
            # A journal of its own each: a router given one left with jobs would take
            # the new jobs (the same msgids) for duplicates of those.
            path = f"{tmp}/profile-{figure}.sqlite3" if name == "sqlite" else args.pg_dsn
            store = Store(name, "full", path)
            stats_path = out / f"router-{figure}-{name}.prof"
            jobs = args.jobs if figure == "enqueue" else args.e2e_jobs
            rate = measure(jobs, args.window, store, groups, profile=stats_path)
            print(f"\nprofile: router, {figure}, {name} (under cProfile: {rate:,.0f} jobs/s)")
            stats = pstats.Stats(str(stats_path))
            stats.sort_stats("tottime").print_stats(12)
            # The router's own calls and the driver's, start-up and imports left out.
            stats.sort_stats("cumulative").print_stats(LOOP_CALLS, 30)
    finally:
        if groups is not None:
            groups.drop_all()


def report(args: argparse.Namespace, runs: dict[str, list[float]], pg_note: str | None) -> None:
    medians = {name: statistics.median(values) for name, values in runs.items()}
    width = max(map(len, medians))
    print(
        f"durable enqueue: {args.jobs} jobs, window {args.window}; e2e: {args.e2e_jobs} jobs; "
        f"median of {args.repeat} run(s)"
    )
    for name, value in medians.items():
        each = " / ".join(f"{v:,.0f}" for v in runs[name])
        print(f"  {name:<{width}}  {value:>10,.0f} jobs/s   ({each})")
    enqueue = medians["enqueue_sqlite_full"]
    print(
        f"target durable enqueue >= 30,000/s: {'met' if enqueue >= 30_000 else 'NOT MET'} "
        f"({enqueue:,.0f}); e2e journal on/off: "
        f"{medians['e2e_sqlite_full'] / medians['e2e_no_journal']:.2f}"
    )
    if pg_note is not None:
        print(pg_note)
        return
    ratio = medians["enqueue_postgresql_full"] / enqueue
    e2e_ratio = medians["e2e_postgresql_full"] / medians["e2e_sqlite_full"]
    print(
        f"PostgreSQL/SQLite durable enqueue {ratio:.3f} (target >= {PG_TARGET:.2f}: "
        f"{'met' if ratio >= PG_TARGET else 'not met'}); end to end {e2e_ratio:.2f}"
    )
    if args.repeat > 1:
        for figure in ("enqueue", "e2e"):
            pg_runs, sqlite_runs = runs[f"{figure}_postgresql_full"], runs[f"{figure}_sqlite_full"]
            ratios = [pg / lite for pg, lite in zip(pg_runs, sqlite_runs, strict=True)]
            met = sum(value >= PG_TARGET for value in ratios)
            print(
                f"  {figure} PostgreSQL/SQLite per round: "
                + " / ".join(f"{value:.2f}" for value in ratios)
                + (f" ({met} of {len(ratios)} >= {PG_TARGET:.2f})" if figure == "enqueue" else "")
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=50_000, help="jobs for the enqueue rate")
    parser.add_argument("--e2e-jobs", type=int, default=20_000, help="jobs end to end")
    parser.add_argument("--window", type=int, default=2_000, help="unacknowledged REQUESTs")
    parser.add_argument("--quick", action="store_true", help="10,000 / 3,000 jobs")
    parser.add_argument("--repeat", type=int, default=1, help="rounds; medians are reported")
    parser.add_argument(
        "--pg-dsn", default=PG_DSN, help=f"PostgreSQL for the group journal (default {PG_DSN})"
    )
    parser.add_argument("--skip-postgres", action="store_true", help="SQLite and no journal only")
    parser.add_argument(
        "--profile", type=Path, metavar="DIR", help="then cProfile the routers; stats kept in DIR"
    )
    parser.add_argument(
        "--poll",
        type=float,
        default=0.005,
        metavar="SECONDS",
        help="end to end: ask the router's STATUS this often (default 0.005)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.e2e_jobs = 10_000, 3_000
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    pg_note: str | None = None
    if args.skip_postgres:
        pg_note = "PostgreSQL journal: skipped (--skip-postgres)"
    else:
        missing = postgres_missing(args.pg_dsn)
        if missing is not None:
            pg_note = f"PostgreSQL journal: skipped, no server at {args.pg_dsn} ({missing})"
    pg = pg_note is None
    load_before = load()
    print(f"load average before: {load_before}", flush=True)
    runs: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="emq-durability-") as tmp:
        rounds = Rounds(args, tmp, pg)
        try:
            for number in range(args.repeat):
                for name, value in rounds.run(number):
                    runs.setdefault(name, []).append(value)
                print(f"round {number + 1} of {args.repeat} done", flush=True)
        finally:
            rounds.close()
        load_after = load()
        report(args, runs, pg_note)
        print(f"load average before: {load_before}; after: {load_after}")
        if args.profile is not None:
            profile_routers(args, tmp, pg, args.profile)
    if args.json:
        figures: dict[str, object] = {
            name: statistics.median(values) for name, values in runs.items()
        }
        figures.update(runs=runs, load_before=load_before, load_after=load_after)
        if pg_note is not None:
            figures["postgresql"] = pg_note
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
