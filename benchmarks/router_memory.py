"""The router's memory under a million jobs sent one at a time with a plain ``.delay()``.

    python benchmarks/router_memory.py                          # 1,000,000 jobs, with a job manager
    python benchmarks/router_memory.py --jobs 1000000 --no-jobmanager   # they pile up stored
    python benchmarks/router_memory.py --jobs 200000 --every 2

Our router (journal on, ``JOURNAL_SYNC`` full unless set) and one job manager
with 2 worker processes running ``benchmarks.noop_jobs``; this process sends
``--jobs`` ``noop.delay(i)``, one call each, timing every call. A thread
samples the router's and the job manager's resident memory (/proc VmRSS)
every 0.2 s. A line every ``--every`` seconds: jobs sent, jobs done (the
router's STATUS ``processed`` for the default queue, or with
``--no-jobmanager`` its MONITOR ``queued``, the jobs stored), RSS of both.

At the end: the router's peak RSS (sampled, and the kernel's high-water mark
VmHWM), its RSS once ``--mark`` jobs were sent, once all were sent and at the
end (all done), the job manager's peak, the longest single ``.delay()``, the
seconds and jobs/s until all were done, CPU microseconds per job, and whether
the count grew by exactly ``--jobs``. Exits 1 if it did not (waiting ends
once the count has not moved for ``--stall`` seconds).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._peers import (
    Admin,
    CpuMeter,
    Proc,
    rss_mib,
    start_ours,
    start_router_only,
)

#: Seconds between two RSS samples.
SAMPLE_EVERY = 0.2
#: A ``.delay()`` this long (s) is counted: one that waits for its socket to
#: drain (its queue full, ``CLIENT_SNDHWM``) rather than only queueing.
SLOW_DELAY = 0.1


@dataclass(frozen=True)
class Sample:
    """One reading: seconds since the first send, jobs sent by then, RSS in MiB."""

    seconds: float
    sent: int
    router: float
    jobmanager: float = 0.0


@dataclass(frozen=True)
class Memory:
    """What the samples say of the router's memory (MiB); None: never reached."""

    peak: float
    at_mark: float | None
    all_sent: float | None
    at_end: float
    jobmanager_peak: float

    @property
    def growth(self) -> float | None:
        """From the mark to the end: near 0 when memory does not grow with the count."""
        return None if self.at_mark is None else self.at_end - self.at_mark


def rss_once_sent(samples: Sequence[Sample], sent: int) -> float | None:
    """The router's RSS in the first sample taken once ``sent`` jobs were sent."""
    return next((s.router for s in samples if s.sent >= sent), None)


def memory_summary(samples: Sequence[Sample], mark: int, jobs: int) -> Memory:
    """Peak, at ``mark`` jobs sent, once all ``jobs`` were sent, and at the last sample."""
    if not samples:
        raise ValueError("no samples")
    return Memory(
        peak=max(s.router for s in samples),
        at_mark=rss_once_sent(samples, mark),
        all_sent=rss_once_sent(samples, jobs),
        at_end=samples[-1].router,
        jobmanager_peak=max(s.jobmanager for s in samples),
    )


class Sampler:
    """A thread reading the RSS of the router (and job manager) every :data:`SAMPLE_EVERY`."""

    def __init__(self, router: int, jobmanager: int | None, sent: Callable[[], int]) -> None:
        self.pids = (router, jobmanager)
        self.sent = sent
        self.samples: list[Sample] = []
        self.began = time.perf_counter()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def start(self) -> None:
        self.began = time.perf_counter()
        self.thread.start()

    def take(self) -> Sample:
        router, jobmanager = self.pids
        sample = Sample(
            time.perf_counter() - self.began,
            self.sent(),
            rss_mib(router),
            rss_mib(jobmanager) if jobmanager else 0.0,
        )
        self.samples.append(sample)
        return sample

    def _run(self) -> None:
        while not self.done.wait(SAMPLE_EVERY):
            self.take()

    def stop(self) -> None:
        self.done.set()
        self.thread.join()
        self.take()


class Sender:
    """``noop.delay(i)`` one call at a time, each timed."""

    def __init__(self) -> None:
        self.sent = 0
        self.longest = 0.0
        self.longest_at = 0
        self.slow = 0

    def count(self) -> int:
        return self.sent

    def send(self, jobs: int, every: float, line: Callable[[], None]) -> None:
        """Send ``jobs``, calling ``line()`` every ``every`` seconds."""
        from benchmarks.noop_jobs import noop

        clock = time.perf_counter
        next_line = clock() + every
        for i in range(jobs):
            before = clock()
            noop.delay(i)
            took = clock() - before
            self.sent = i + 1
            if took > SLOW_DELAY:
                self.slow += 1
            if took > self.longest:
                self.longest, self.longest_at = took, i + 1
            if (i & 1023) == 0 and before >= next_line:
                line()
                next_line = clock() + every


def _progress(sampler: Sampler, done: Callable[[], int]) -> Callable[[], None]:
    with_jobmanager = sampler.pids[1] is not None

    def line() -> None:
        now = sampler.take()
        jobmanager = f" {now.jobmanager:7.1f}" if with_jobmanager else ""
        print(
            f"{now.seconds:7.1f} {now.sent:10,} {done():10,} {now.router:11.1f}{jobmanager}",
            flush=True,
        )

    return line


def _wait_done(
    done: Callable[[], int], jobs: int, stall: float, every: float, line: Callable[[], None]
) -> tuple[float, int]:
    """Poll ``done()`` until ``jobs`` or it has not moved for ``stall`` seconds;
    returns (perf_counter when it got there or stalled, the count)."""
    count, moved, next_line = done(), time.perf_counter(), time.perf_counter() + every
    while count < jobs:
        time.sleep(SAMPLE_EVERY)
        now, latest = time.perf_counter(), done()
        if latest != count:
            count, moved = latest, now
        elif now - moved > stall:
            return moved, count
        if now >= next_line:
            line()
            next_line = now + every
    return time.perf_counter(), count


def run(jobs: int, with_jobmanager: bool, mark: int, every: float, stall: float) -> int:
    from benchmarks._client_compat import close_clients
    from django_eventmq.runtime import config

    sync = os.environ.get("EMQ_JOURNAL_SYNC", "full")
    workdir = Path(tempfile.mkdtemp(prefix="emq-router-memory-"))
    # The routers started below take the journal path from this process's environment.
    os.environ["EMQ_JOURNAL_PATH"] = str(workdir / "journal.sqlite3")
    jobmanager: Proc | None = None
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, workdir, ignore_errors=True)
        if with_jobmanager:
            stack = start_ours(concurrency=2)
            cleanup.callback(stack.stop)
            router, jobmanager, frontend, admin = (
                stack.router,
                stack.jobmanager,
                stack.frontend,
                stack.admin,
            )
        else:
            router, frontend, admin_addr = start_router_only()
            cleanup.callback(router.stop)
            admin = Admin(admin_addr)
            cleanup.callback(admin.close)
        cleanup.callback(close_clients)
        os.environ["EMQ_BROKER_ADDR"] = frontend
        config.reset()

        def stored() -> int:
            return int(admin.call("MONITOR", timeout=30).get("queued", 0))

        def processed() -> int:
            return admin.processed()

        count = processed if with_jobmanager else stored
        what = "processed" if with_jobmanager else "stored"
        base = count()

        def done() -> int:
            return count() - base

        pids = {"router": router.pid} | ({"jobmanager": jobmanager.pid} if jobmanager else {})
        meter = CpuMeter(pids)
        sender = Sender()
        sampler = Sampler(router.pid, jobmanager.pid if jobmanager else None, sender.count)
        line = _progress(sampler, done)
        print(
            f"router memory: {jobs:,} plain .delay() one at a time, journal sync {sync}, "
            + ("one job manager (2 workers)" if jobmanager else "no job manager"),
            flush=True,
        )
        jm_column = f" {'jm MiB':>7}" if jobmanager else ""
        print(f"{'s':>7} {'sent':>10} {what:>10} {'router MiB':>11}{jm_column}", flush=True)
        meter.start()
        sampler.start()
        start = time.perf_counter()
        try:
            sender.send(jobs, every, line)
            sent_at = time.perf_counter()
            line()
            finished, got = _wait_done(done, jobs, stall, every, line)
            line()
        finally:
            sampler.stop()
        cpu = meter.per_job(jobs)
        hwm = rss_mib(router.pid, "VmHWM")
        journal = sum(f.stat().st_size for f in workdir.iterdir()) / 2**20
    memory = memory_summary(sampler.samples, min(mark, jobs), jobs)
    took = finished - start
    print(f"\nsent {jobs:,} in {sent_at - start:.1f} s ({jobs / (sent_at - start):,.0f} /s)")
    print(f"all {what}: {got:,} of {jobs:,} in {took:.1f} s ({got / took:,.0f} jobs/s)")
    print(
        f"router RSS: peak {memory.peak:.1f} MiB (VmHWM {hwm:.1f}); "
        f"{_mib(memory.at_mark)} after {min(mark, jobs):,} sent, "
        f"{_mib(memory.all_sent)} once all were sent, {memory.at_end:.1f} at the end"
        f" ({_signed(memory.growth)} from {min(mark, jobs):,} to the end)"
    )
    if jobmanager:
        print(f"job manager RSS: peak {memory.jobmanager_peak:.1f} MiB")
    print(
        f"longest .delay(): {sender.longest * 1000:.1f} ms (call {sender.longest_at:,}), "
        f"{sender.slow:,} over {SLOW_DELAY * 1000:.0f} ms; "
        f"journal at the end: {journal:.0f} MiB"
    )
    print("CPU us/job: " + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items()))
    if got != jobs:
        print(f"FAILED: {what} grew by {got:,}, not {jobs:,}")
        return 1
    print(f"every job {what} ({what} grew by exactly {jobs:,})")
    return 0


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f} MiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000, help="jobs to send")
    parser.add_argument(
        "--no-jobmanager", action="store_true", help="router alone: the jobs pile up stored"
    )
    parser.add_argument(
        "--mark", type=int, default=100_000, help="also report the RSS once this many were sent"
    )
    parser.add_argument("--every", type=float, default=5.0, help="seconds between lines")
    parser.add_argument(
        "--stall", type=float, default=60.0, help="give up when the count stops this long"
    )
    options = parser.parse_args(argv)
    if min(options.jobs, options.mark) < 1 or min(options.every, options.stall) <= 0:
        parser.error("--jobs, --mark, --every and --stall must be positive")
    return run(options.jobs, not options.no_jobmanager, options.mark, options.every, options.stall)


if __name__ == "__main__":
    sys.exit(main())
