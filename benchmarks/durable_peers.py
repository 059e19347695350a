"""Issue 32's figures: guaranteed sends against durable peers, and low-load latency.

    python benchmarks/durable_peers.py                  # 20,000 jobs per figure
    python benchmarks/durable_peers.py --jobs 500 --plain-jobs 2000 --latency-jobs 100
    python benchmarks/throughput.py --durable           # the same, from the throughput report
    python benchmarks/durable_peers.py --runs 5 --json issue32.json   # 5 runs, medians judged

Every system runs no-op jobs end to end with 2 worker processes; each send is
stored before it returns:

- **ours**: ``@job(guarantee=True)``, journal on at its default sync (the
  ``.delay()`` returns once the router's commit is on disk);
- **Huey + Redis** on a Redis of its own with ``appendonly yes`` and
  ``appendfsync always`` (each LPUSH fsynced before Redis answers);
- **Celery 5 + RabbitMQ** and **Dramatiq + RabbitMQ**: durable queues,
  persistent messages, publisher confirms, acks after the task, in a vhost
  made for the run and removed after it (``benchmarks/_rabbit.py``).

Each is measured (a) with one sender calling the ordinary enqueue one job at
a time and (b) with ``--threads`` (8) sending threads, each sending its share
one at a time. A figure is jobs/s from the first send until the last job's
"done" datagram came (``benchmarks/_udp.py``: every system's job sends one,
so "all ran" is seen the same way for each). Beside them **the floor**
(``benchmarks/_floor.py``: the same hops and one fdatasync per commit, no
logic) sends the same ways, and without waiting for ACKs for the plain figure.

Then ours with a plain ``.delay()`` and Huey on a Redis with persistence off,
end to end (``throughput.py``'s figures), and the low-load start latency, p50
and p99: each job sends its start time over UDP (``benchmarks._udp.Probe``,
run through ``latency.py``'s one-at-a-time and paced loops), Huey + Redis
first (low load, its peak, half its peak), then ours (journal on, default
sync) at low load and at half Huey's peak rate, then the floor at low load.
The verdicts and the table: ``benchmarks/_durable_report.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import importlib
import importlib.util

import zmq

from benchmarks import _durable_report as report
from benchmarks._floor import PAYLOAD, Floor
from benchmarks._huey import HueyStack, huey_missing
from benchmarks._peers import BIN, Proc, Stack, start_ours
from benchmarks._rabbit import NoVhost, Vhost, rabbit_missing
from benchmarks._summary import median_of, write_json
from benchmarks._udp import DoneCounter, Probe

#: Sending threads in (b), as a threaded web server would have.
THREADS = 8
#: Jobs run before measuring: connections, imports, a worker that starts late.
WARMUP = 200
#: Seconds to wait for the warm-up jobs (a Celery worker takes a few to start).
WARMUP_TIMEOUT = 120.0

Send = Callable[[int], Any]


# -- sending and counting -----------------------------------------------------------


def drive(send: Send, counter: DoneCounter, jobs: int, threads: int) -> dict[str, Any]:
    """``jobs`` sends of ``send(counter.port)``, from ``threads`` threads (each its
    share, one at a time); jobs/s from the first send until the last "done"."""
    target = counter.count + jobs
    counter.expect(target)
    shares = [jobs // threads + (1 if n < jobs % threads else 0) for n in range(threads)]
    errors: list[BaseException] = []
    gate = threading.Barrier(threads + 1)

    def sender(count: int) -> None:
        gate.wait()
        try:
            for _ in range(count):
                send(counter.port)
        except BaseException as exc:  # reported below, in the measuring thread
            errors.append(exc)

    workers = [threading.Thread(target=sender, args=(n,), daemon=True) for n in shares]
    for worker in workers:
        worker.start()
    gate.wait()
    start = time.perf_counter()
    for worker in workers:
        worker.join()
    sent = time.perf_counter()
    if errors:
        raise errors[0]
    finished, count = counter.wait(max(120.0, jobs / 50))
    completed = jobs - (target - count) if count < target else jobs
    return {
        "jobs": jobs,
        "threads": threads,
        "completed": completed,
        "send_per_second": jobs / (sent - start),
        "per_second": completed / (finished - start),
    }


def warm_up(send: Send, counter: DoneCounter, name: str) -> None:
    target = counter.count + WARMUP
    counter.expect(target)
    for _ in range(WARMUP):
        send(counter.port)
    _, count = counter.wait(WARMUP_TIMEOUT)
    if count < target:
        raise RuntimeError(f"{name}: only {WARMUP - (target - count)} of {WARMUP} warm-up jobs ran")


# -- the systems ------------------------------------------------------------------------


@contextmanager
def ours_guaranteed(started: list[Stack] | None = None) -> Iterator[Send]:
    """Our router + job manager (2 workers), ``done_guaranteed.delay`` from here
    (the stack appended to ``started``, for a profiler to find its processes)."""
    from benchmarks._client_compat import close_clients
    from benchmarks.noop_jobs import done_guaranteed
    from django_eventmq.runtime import config

    stack = start_ours(concurrency=2)
    if started is not None:
        started.append(stack)
    os.environ["EMQ_BROKER_ADDR"] = stack.frontend
    config.reset()
    try:
        yield done_guaranteed.delay
    finally:
        close_clients()
        stack.stop()


@contextmanager
def huey_durable() -> Iterator[Send]:
    """Huey's consumer (2 process workers) on a Redis with ``appendfsync always``."""
    stack = HueyStack(workers=2, durable=True)
    try:
        from benchmarks import huey_jobs

        yield huey_jobs.done
    finally:
        stack.stop()


@contextmanager
def _rabbit_worker(vhost: Vhost, command: list[str], module: str) -> Iterator[Any]:
    """A worker process on the vhost, and the jobs ``module`` (``benchmarks.*_jobs``,
    which reads ``EMQ_BENCH_AMQP_URL`` when imported) sending to it from here."""
    os.environ["EMQ_BENCH_AMQP_URL"] = vhost.url
    worker = Proc(command, env={"EMQ_BENCH_AMQP_URL": vhost.url})
    try:
        jobs = importlib.import_module(module)
        jobs.connect(vhost.url)  # this process may have sent to an earlier run's vhost
        yield jobs
    finally:
        worker.stop(30)


@contextmanager
def celery_rabbit(vhost: Vhost) -> Iterator[Send]:
    """A Celery worker (prefork, concurrency 2) on the vhost; ``done.delay`` from here."""
    command = [
        *(str(BIN / "celery"), "-A", "benchmarks.celery_jobs", "worker"),
        *("--concurrency", "2", "--pool", "prefork", "--loglevel", "warning"),
        *("--without-gossip", "--without-mingle", "--without-heartbeat"),
    ]
    with _rabbit_worker(vhost, command, "benchmarks.celery_jobs") as jobs:
        yield jobs.done.delay


@contextmanager
def dramatiq_rabbit(vhost: Vhost) -> Iterator[Send]:
    """A Dramatiq worker (2 processes, 1 thread each) on the vhost; ``done.send`` from here."""
    command = [str(BIN / "dramatiq"), "benchmarks.dramatiq_jobs"]
    command += ["--processes", "2", "--threads", "1"]
    with _rabbit_worker(vhost, command, "benchmarks.dramatiq_jobs") as jobs:
        yield jobs.done.send


def _missing_module(*names: str) -> str | None:
    for name in names:
        if importlib.util.find_spec(name) is None:
            return f"the {name!r} package is not installed (pip install -e '.[bench]')"
    return None


def missing_peers(rabbit: str | None, huey: str | None) -> dict[str, str]:
    """Why each durable peer cannot run here (``report.PEERS`` names), given why
    RabbitMQ and Huey + Redis cannot (None: they can)."""
    why = {
        "huey": huey,
        "celery": rabbit or _missing_module("celery"),
        "dramatiq": rabbit or _missing_module("dramatiq", "pika"),
    }
    return {name: reason for name, reason in why.items() if reason}


# -- the floor ----------------------------------------------------------------------------


def _floor_sender(address: str, jobs: int, wait_ack: bool, out: list[float]) -> None:
    """Send ``jobs`` floor jobs (waiting for each ACK, or not) until every start stamp came."""
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    sent = stamps = 0
    acked = True
    deadline = time.monotonic() + max(60.0, jobs / 50)
    try:
        while stamps < jobs:
            if sent < jobs and acked:
                try:
                    sock.send(PAYLOAD, zmq.NOBLOCK)
                    sent += 1
                    acked = not wait_ack
                except zmq.Again:
                    pass
            busy = sent < jobs and acked
            if sock.poll(0 if busy else 1000):
                while True:
                    try:
                        frame = sock.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    if frame == b"ACK":
                        acked = True
                    else:
                        stamps += 1
            elif time.monotonic() > deadline:
                raise TimeoutError(f"floor: {stamps} of {jobs} jobs ran")
        out.append(time.perf_counter())
    finally:
        sock.close(linger=0)


def floor_rate(floor: Floor, jobs: int, threads: int, wait_ack: bool = True) -> dict[str, Any]:
    """The floor's jobs/s: ``threads`` senders of their share each, one at a time."""
    shares = [jobs // threads + (1 if n < jobs % threads else 0) for n in range(threads)]
    ends: list[float] = []
    start = time.perf_counter()
    workers = [
        threading.Thread(target=_floor_sender, args=(floor.frontend, n, wait_ack, ends))
        for n in shares
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if len(ends) < threads:
        raise RuntimeError("floor: a sender failed")
    return {"jobs": jobs, "threads": threads, "per_second": jobs / (max(ends) - start)}


def measure_floor(jobs: int, threads: int) -> dict[str, Any]:
    floor = Floor(sync=True)
    try:
        floor_rate(floor, min(WARMUP, jobs), 1)
        return {
            "one": floor_rate(floor, jobs, 1),
            "threads": floor_rate(floor, jobs, threads),
            "plain": floor_rate(floor, jobs, 1, wait_ack=False),
        }
    finally:
        floor.stop()


# -- throughput ----------------------------------------------------------------------------


def make_vhost(skipped: dict[str, str], make: Callable[[], Vhost] = Vhost) -> Vhost | None:
    """The benchmark's vhost, or None with both RabbitMQ peers added to ``skipped``
    (and their skip lines printed) when it cannot be made."""
    try:
        return make()
    except NoVhost as exc:
        why = f"cannot make a vhost ({exc})"
        for name in ("celery", "dramatiq"):
            skipped.setdefault(name, why)
        for line in report.skip_lines({n: skipped[n] for n in ("celery", "dramatiq")}):
            print(line, flush=True)
        return None


def measure_durable(jobs: int, threads: int, skipped: dict[str, str]) -> dict[str, Any]:
    """Each system not in ``skipped``, one at a time then ``threads`` threads; the floor."""
    results: dict[str, Any] = {}
    counter = DoneCounter()
    vhost: Vhost | None = None
    try:
        systems: list[tuple[str, Callable[[], Any]]] = [
            ("ours", ours_guaranteed),
            ("huey", huey_durable),
        ]
        if "celery" not in skipped or "dramatiq" not in skipped:
            vhost = make_vhost(skipped)
        if vhost is not None:
            systems.append(("celery", lambda: celery_rabbit(vhost)))
            systems.append(("dramatiq", lambda: dramatiq_rabbit(vhost)))
        for name, start in systems:
            if name in skipped:
                continue
            label = report.PEERS[name]
            print(f"{label}: warm-up, then {jobs} jobs one at a time, then {threads} threads")
            with start() as send:
                warm_up(send, counter, label)
                one = drive(send, counter, jobs, 1)
                print(f"  one at a time: {json.dumps(one)}", flush=True)
                many = drive(send, counter, jobs, threads)
                print(f"  {threads} threads: {json.dumps(many)}", flush=True)
            results[name] = {"one": one, "threads": many}
    finally:
        counter.close()
        if vhost is not None:
            vhost.remove()
    print(f"floor (same hops, one fdatasync per commit, no logic): {jobs} jobs ...", flush=True)
    results["floor"] = measure_floor(jobs, threads)
    print(f"  {json.dumps(results['floor'])}", flush=True)
    return results


def measure_plain(jobs: int, huey: str | None) -> dict[str, Any]:
    """Ours with a plain ``.delay()`` and Huey + Redis (persistence off), end to end."""
    from benchmarks import throughput

    warmup = min(500, jobs)
    print(f"ours, plain .delay(): {jobs} jobs ...", flush=True)
    plain: dict[str, Any] = {"ours": throughput.measure_ours(jobs, warmup)}
    if huey is None:
        print(f"huey + redis (persistence off): {jobs} jobs ...", flush=True)
        plain["huey"] = throughput.measure_huey(jobs, warmup)
    return plain


# -- latency --------------------------------------------------------------------------------


def _probe_send(probe: Probe, job: Callable[[int, int], Any]) -> Callable[[], int]:
    def send() -> int:
        seq = probe.next_seq()
        job(probe.port, seq)
        return seq

    return send


def _latency_of(
    name: str, send: Callable[[], int], probe: Probe, jobs: int, rate: float | None, seconds: float
) -> dict[str, Any]:
    """Low load (one at a time) and, paced at ``rate`` (None: its own peak first,
    then half of it), ``seconds`` of load."""
    from benchmarks import latency

    for _ in range(min(60, jobs)):
        if probe.wait(send(), 60.0) is None:
            raise TimeoutError(f"{name}: a warm-up job did not start within 60 s")
    print(f"  {name}: low load, {jobs} jobs one at a time ...", flush=True)
    out: dict[str, Any] = {"low_load": latency.one_at_a_time(send, probe.wait, jobs)}
    if rate is None:
        print(f"  {name}: peak, {jobs} jobs as fast as possible ...", flush=True)
        out["peak"] = latency.paced(send, probe.wait, jobs, None)
        rate = out["peak"]["jobs_per_second"] / 2
    count = max(100, int(rate * seconds))
    print(f"  {name}: {count} jobs at {rate:,.0f}/s ...", flush=True)
    out["half_peak"] = latency.paced(send, probe.wait, count, rate)
    return out


def measure_latency(jobs: int, seconds: float, huey: str | None) -> dict[str, Any]:
    """Huey + Redis (persistence off) first, then ours at half Huey's peak, then the floor."""
    from benchmarks import latency

    probe = Probe()
    results: dict[str, Any] = {}
    try:
        rate = None
        if huey is None:
            print("latency: huey + redis (persistence off), 2 process workers ...", flush=True)
            stack = HueyStack(workers=2)
            try:
                from benchmarks import huey_jobs

                send = _probe_send(probe, huey_jobs.udp_stamp)
                results["huey"] = _latency_of("huey", send, probe, jobs, None, seconds)
            finally:
                stack.stop()
            rate = results["huey"]["peak"]["jobs_per_second"] / 2
        print("latency: ours (journal on, default sync), 2 workers ...", flush=True)
        results["ours"] = _latency_of_ours(probe, jobs, rate, seconds)
    finally:
        probe.close()
    print("latency: the floor ...", flush=True)
    results["floor"] = latency.measure_floor(jobs)
    return results


def _latency_of_ours(probe: Probe, jobs: int, rate: float | None, seconds: float) -> Any:
    from benchmarks import latency
    from benchmarks._client_compat import close_clients
    from benchmarks.noop_jobs import udp_stamp, udp_stamp_guaranteed
    from django_eventmq.runtime import config

    stack = start_ours(concurrency=2)
    os.environ["EMQ_BROKER_ADDR"] = stack.frontend
    config.reset()
    try:
        out = _latency_of("ours", _probe_send(probe, udp_stamp.delay), probe, jobs, rate, seconds)
        print(f"  ours guaranteed: low load, {jobs} jobs one at a time ...", flush=True)
        send = _probe_send(probe, udp_stamp_guaranteed.delay)
        out["guaranteed_low_load"] = latency.one_at_a_time(send, probe.wait, jobs)
        return out
    finally:
        close_clients()
        stack.stop()


# -- the run ----------------------------------------------------------------------------------


def run(
    jobs: int,
    plain_jobs: int,
    latency_jobs: int,
    load_seconds: float,
    threads: int = THREADS,
    skip_latency: bool = False,
) -> dict[str, Any]:
    """Every figure of issue 32 in one run (skipped peers under ``skipped``)."""
    huey = huey_missing()
    skipped = missing_peers(rabbit_missing(), huey)
    for line in report.skip_lines(skipped):
        print(line, flush=True)
    results: dict[str, Any] = {"jobs": jobs, "threads": threads, "skipped": skipped}
    results["durable"] = measure_durable(jobs, threads, skipped)
    results["plain"] = measure_plain(plain_jobs, huey)
    if not skip_latency:
        results["latency"] = measure_latency(latency_jobs, load_seconds, huey)
    return results


#: ``--ours-only``: the paced run's rate (jobs/s) when no Huey peak sets it.
OURS_ONLY_RATE = 1000.0


def run_ours_only(
    jobs: int, latency_jobs: int, load_seconds: float, threads: int = THREADS
) -> dict[str, Any]:
    """Ours alone (no peer, no floor): guaranteed one at a time and with ``threads``
    threads, and the start latency (low load, paced at :data:`OURS_ONLY_RATE`,
    guaranteed at low load); what ``versus.py --guaranteed`` compares between
    two commits. The shape is :func:`run`'s, with only ours in it."""
    counter = DoneCounter()
    try:
        print(f"ours, @job(guarantee=True): {jobs} jobs one at a time, then {threads} threads")
        with ours_guaranteed() as send:
            warm_up(send, counter, "ours")
            one = drive(send, counter, jobs, 1)
            many = drive(send, counter, jobs, threads)
    finally:
        counter.close()
    print(
        f"  one at a time {one['per_second']:,.0f}/s, {threads} threads "
        f"{many['per_second']:,.0f}/s",
        flush=True,
    )
    probe = Probe()
    try:
        latency = _latency_of_ours(probe, latency_jobs, OURS_ONLY_RATE, load_seconds)
    finally:
        probe.close()
    for name in ("low_load", "half_peak", "guaranteed_low_load"):
        start = latency[name]["start"]
        print(f"  start {name}: p50 {start['p50']:.3f} / p99 {start['p99']:.3f} ms", flush=True)
    return {
        "jobs": jobs,
        "threads": threads,
        "skipped": {},
        "durable": {"ours": {"one": one, "threads": many}},
        "latency": {"ours": latency},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per throughput figure")
    parser.add_argument("--plain-jobs", type=int, help="jobs for the plain figures (--jobs)")
    parser.add_argument("--latency-jobs", type=int, default=600, help="jobs one at a time")
    parser.add_argument("--load-seconds", type=float, default=5.0, help="half-peak run, s")
    parser.add_argument("--threads", type=int, default=THREADS, help="sending threads in (b)")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument(
        "--ours-only",
        action="store_true",
        help="ours alone: guaranteed one at a time and threaded, start latency (for versus.py)",
    )
    parser.add_argument("--runs", type=int, default=1, help="N runs in turn; medians judged")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="only profile ours guaranteed one at a time (--jobs) under py-spy; raw files in DIR",
    )
    options = parser.parse_args(argv)
    if options.profile:
        from benchmarks import _profile_send

        profiled = _profile_send.profile(options.jobs, options.profile)
        _profile_send.print_profile(profiled)
        write_json(options.json, profiled)
        return 0
    if min(options.jobs, options.latency_jobs, options.threads) < 1:
        parser.error("--jobs, --latency-jobs and --threads must be at least 1")
    if options.runs < 1:
        parser.error("--runs must be at least 1")
    if options.ours_only:
        alone = run_ours_only(
            options.jobs, options.latency_jobs, options.load_seconds, options.threads
        )
        write_json(options.json, alone)
        return 0
    runs: list[dict[str, Any]] = []
    for number in range(1, options.runs + 1):
        if options.runs > 1:
            print(f"\n[run {number}/{options.runs}]", flush=True)
        runs.append(
            run(
                options.jobs,
                options.plain_jobs or options.jobs,
                options.latency_jobs,
                options.load_seconds,
                options.threads,
                options.skip_latency,
            )
        )
    if options.runs == 1:
        results = runs[0]
    else:
        print()
        for number, one in enumerate(runs, 1):
            print(report.run_line(number, len(runs), one))
        results = {**median_of(runs), "runs": runs}
        print(f"\nmedian of {len(runs)} runs (each figure's median on its own):")
    report.print_report(results)
    write_json(options.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
