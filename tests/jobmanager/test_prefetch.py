"""Adaptive prefetch: deep while jobs are short, none while they are long.

Pure arithmetic first, then the router's side of UNREADY, then a job manager
(real worker processes) driven step by step on a clock the test moves, so a
job "runs long" because the clock says so, never because the test waits.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from django_eventmq.cli.options import add_jobmanager_arguments, settings_from_options
from django_eventmq.errors import ConfigurationError
from django_eventmq.jobmanager.manager import JobManager
from django_eventmq.jobmanager.pool import Child, Pool, Status
from django_eventmq.jobmanager.prefetch import Prefetch
from django_eventmq.protocol import Done, Ready, Unready
from django_eventmq.router.routing import RoutedJob, Routing
from django_eventmq.runtime.settings import Settings, from_mapping
from tests.fake_router import SAMPLE, FakeRouter, body
from tests.jobs_fixtures.running import settings_for
from tests.support import wait_for

# -- the arithmetic ----------------------------------------------------------------------


def test_nothing_is_prefetched_before_a_job_was_timed() -> None:
    prefetch = Prefetch(cap=128, budget=0.05, concurrency=2)
    assert (prefetch.value, prefetch.depth, prefetch.mean) == (0, 1, None)


def test_short_jobs_grow_it_to_the_cap_and_long_jobs_shrink_it_to_zero() -> None:
    prefetch = Prefetch(cap=128, budget=0.05, concurrency=2)
    prefetch.observe(0.0002)
    assert (prefetch.value, prefetch.depth) == (128, 65)  # 1 + ceil(128 / 2) per child
    prefetch.observe(0.3)  # one long job among short ones is enough to notice
    assert prefetch.value == 1
    prefetch.observe(0.3)
    assert (prefetch.value, prefetch.depth) == (0, 1)
    for _ in range(30):
        prefetch.observe(0.0)
    assert prefetch.value == 128


def test_the_prefetch_is_the_budget_of_queued_work_over_the_mean_run_time() -> None:
    prefetch = Prefetch(cap=100, budget=0.5, concurrency=2)
    prefetch.observe(0.25)  # 0.5 s per process * 2 processes / 0.25 s per job
    assert (prefetch.value, prefetch.depth) == (4, 3)
    prefetch.observe(0.25 + 0.25 / 0.2)  # the average moves to 0.5 s: 2 jobs
    assert prefetch.mean == pytest.approx(0.5)
    assert (prefetch.value, prefetch.depth) == (2, 2)


def test_a_cap_of_zero_never_prefetches() -> None:
    prefetch = Prefetch(cap=0, budget=0.05, concurrency=4)
    for _ in range(10):
        prefetch.observe(0.0)
    assert (prefetch.value, prefetch.depth, prefetch.fixed) == (0, 1, True)


def test_a_budget_of_zero_is_a_fixed_prefetch() -> None:
    prefetch = Prefetch(cap=16, budget=0, concurrency=4)
    assert (prefetch.value, prefetch.depth, prefetch.fixed) == (16, 5, True)
    prefetch.observe(60.0)
    assert prefetch.value == 16


# -- settings and options ------------------------------------------------------------------


def test_settings_defaults_and_validation() -> None:
    assert (Settings().prefetch, Settings().prefetch_budget) == (1024, 0.05)
    assert from_mapping(environ={"EMQ_PREFETCH_BUDGET": "0.2"}).prefetch_budget == 0.2
    assert from_mapping({"PREFETCH_BUDGET": 0}, environ={}).prefetch_budget == 0
    for bad in (-0.1, float("nan"), "soon", True):
        with pytest.raises(ConfigurationError, match="PREFETCH_BUDGET"):
            from_mapping({"PREFETCH_BUDGET": bad}, environ={})


def test_prefetch_budget_option() -> None:
    parser = argparse.ArgumentParser()
    add_jobmanager_arguments(parser)
    options = parser.parse_args(["--prefetch-budget", "0.5", "--prefetch", "32"])
    settings = settings_from_options(Settings(), options)
    assert (settings.prefetch_budget, settings.prefetch) == (0.5, 32)
    assert "PREFETCH_BUDGET setting or EMQ_PREFETCH_BUDGET, else 0.05" in " ".join(
        parser.format_help().split()
    )
    for bad in ("-1", "soon", "nan", "inf"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--prefetch-budget", bad])


def test_prefetch_budget_option_error_names_what_works(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    add_jobmanager_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--prefetch-budget", "-1"])
    assert (
        "--prefetch-budget: expected a number of seconds >= 0, got '-1'" in capsys.readouterr().err
    )


# -- the router's side: UNREADY ------------------------------------------------------------


def job(msgid: str) -> RoutedJob:
    return RoutedJob(
        msgid, "default", [b"", b"eMQP/1.0", b"REQUEST", msgid.encode()], False, 0.0, seq=1
    )


def test_unready_takes_free_slots_first_and_keeps_the_next_freed_ones() -> None:
    routing = Routing()
    routing.add_worker(b"A", ((10, "default"),), 0.0)
    for _ in range(4):
        routing.ready(b"A", 0.0)
    worker = routing.workers[b"A"]
    assert routing.submit(job("m1"), 1.0) is worker  # 3 free slots left
    routing.unready(b"A", 5)  # 3 free slots go, 2 are owed
    assert (worker.slots, worker.debt, worker.session.extended) == (0, 2, True)
    assert routing.submit(job("m2"), 2.0) is None  # waits at the router
    finished, given = routing.done(b"A", "m1", 3.0)
    assert finished is not None and finished.msgid == "m1"
    assert (given, worker.debt, worker.slots) == (None, 1, 0)  # the freed slot paid the debt
    assert routing.ready(b"A", 4.0) is None  # so does a READY
    assert worker.debt == 0
    given = routing.ready(b"A", 5.0)
    assert given is not None and given.msgid == "m2"


def test_unready_leaves_slots_it_does_not_take() -> None:
    routing = Routing()
    routing.add_worker(b"A", ((10, "default"),), 0.0)
    for _ in range(3):
        routing.ready(b"A", 0.0)
    routing.unready(b"A", 2)
    routing.unready(b"nobody", 2)  # an unknown worker: nothing to do
    assert (routing.workers[b"A"].slots, routing.workers[b"A"].debt) == (1, 0)
    assert routing.submit(job("m1"), 1.0) is routing.workers[b"A"]


# -- the pool times the jobs ---------------------------------------------------------------


@pytest.fixture
def pool() -> Iterator[Pool]:
    made = Pool(Settings(concurrency=1, prefetch=4, job_modules=(SAMPLE,)))
    yield made
    made.close()


def up(pool: Pool) -> Child:
    (child,) = pool.respawn()
    wait_for(lambda: pool.receive(child) == [] and child.status is Status.UP, 20, "child up")
    return child


def test_the_pool_times_a_job_from_handing_it_over_to_its_result(pool: Pool) -> None:
    child = up(pool)
    pool.assign(child, 1, "m1", body("add", 1, 2), now=100.0)
    pool.flush(child)
    results: list[Any] = []
    wait_for(lambda: results.extend(pool.receive(child, now=100.5)) or results, 10, "result")
    assert results == [(1, "ok", '{"value":3}')]
    assert pool.prefetch.mean == 0.5
    assert (pool.prefetch.value, pool.depth) == (0, 1)  # 0.05 s * 1 process / 0.5 s


def test_a_job_stopped_mid_run_counts_for_as_long_as_it_ran(pool: Pool) -> None:
    child = up(pool)
    pool.assign(child, 1, "m1", body("slow", 30), now=100.0)
    pool.flush(child)
    pool.kill(child, now=160.0)  # e.g. its timeout:60 ran out
    assert pool.prefetch.mean == 60.0


# -- a job manager on a clock the test moves ------------------------------------------------

#: Heartbeats far apart: the test's clock jumps by many seconds per step.
CLOCK = {"heartbeat_interval": 1000.0, "heartbeat_timeout": 100000.0}


class Driven:
    """A job manager stepped from the test thread; ``now`` is what it takes for the time."""

    def __init__(self, settings: Settings) -> None:
        self.jm = JobManager(settings, name="test-jm")
        self.now = time.monotonic()
        self.jm.start(self.now)

    def until(
        self, router: FakeRouter, condition: Callable[[], bool], what: str, advance: float = 0.0
    ) -> None:
        """Step (moving the clock by ``advance`` each time) until ``condition`` holds."""

        def check() -> bool:
            self.now += advance
            self.jm.loop_once(10, now=self.now)
            router.pump(0)
            return condition()

        wait_for(check, 30, what, poll=0)

    def steps(self, router: FakeRouter, n: int) -> None:
        for _ in range(n):
            self.jm.loop_once(10, now=self.now)
        router.pump(0.05)


@pytest.fixture
def driven() -> Iterator[Callable[..., Driven]]:
    made: list[Driven] = []

    def make(router: FakeRouter, **options: Any) -> Driven:
        made.append(Driven(settings_for(router, **{**CLOCK, **options})))
        return made[-1]

    yield make
    for item in made:
        item.jm.close()


def our_handshake(router: FakeRouter) -> bytes:
    """ACK the INFORM and send FEATURES as our router does (with ``unready``)."""
    identity, _ = router.handshake(features=True, heartbeat=False)
    return identity


def sent(router: FakeRouter, kind: type[Any]) -> list[Any]:
    return [m for _, m in router.received if isinstance(m, kind)]


def router_holds(router: FakeRouter, requests: int) -> int:
    """Slots the router keeps for the job manager (free, less owed) after ``requests`` jobs."""
    taken_back = sum(m.count for m in sent(router, Unready))
    return router.count(Ready) + router.count(Done) - requests - taken_back


def grow(jm: Driven, router: FakeRouter, identity: bytes) -> None:
    """Run two jobs that take no time (the clock stands still): the prefetch grows to its cap."""
    for i in range(2):
        router.request(identity, body("add", i, i))
    jm.until(router, lambda: router.count(Done) == 2, "two jobs done")


def test_short_jobs_grow_the_prefetch_to_the_cap(
    router: FakeRouter, driven: Callable[..., Driven]
) -> None:
    jm = driven(router, prefetch=6)  # concurrency 2
    identity = our_handshake(router)
    jm.until(router, lambda: router.count(Ready) >= 2, "a READY per worker process")
    jm.steps(router, 5)
    assert router.count(Ready) == 2  # no job timed yet: no prefetch
    assert (jm.jm.credit.slots, jm.jm.pool.depth) == (2, 1)
    grow(jm, router, identity)
    jm.until(router, lambda: router.count(Ready) == 8, "READY for the prefetch")
    assert (jm.jm.prefetch.value, jm.jm.pool.depth, jm.jm.credit.slots) == (6, 4, 8)
    assert router_holds(router, requests=2) == 8
    assert sent(router, Unready) == []


def test_long_jobs_shrink_it_to_zero_and_our_router_is_told_to_keep_fewer_slots(
    router: FakeRouter, driven: Callable[..., Driven]
) -> None:
    jm = driven(router, prefetch=6)
    identity = our_handshake(router)
    grow(jm, router, identity)
    jm.until(router, lambda: router_holds(router, 2) == 8, "the prefetch announced")
    readies = router.count(Ready)
    for i in range(8):  # one per slot; each "runs" 10 s by the job manager's clock
        router.request(identity, body("add", i, i))
    jm.until(router, lambda: router.count(Done) == 10, "eight long jobs done", advance=10.0)
    assert (jm.jm.prefetch.value, jm.jm.pool.depth, jm.jm.credit.slots) == (0, 1, 2)
    # The UNREADY waits a turn or more (SHRINK_AFTER) behind the last DONE.
    jm.until(router, lambda: sent(router, Unready) != [], "an UNREADY", advance=10.0)
    jm.steps(router, 3)
    assert router.count(Ready) == readies  # it never asked for more while they ran
    # It took back what it no longer wants: the router now holds one slot per process.
    assert sum(m.count for m in sent(router, Unready)) == 6
    assert router_holds(router, requests=10) == 2


def test_long_jobs_with_a_router_that_cannot_take_slots_back_get_no_ready_beyond_the_processes(
    router: FakeRouter, driven: Callable[..., Driven]
) -> None:
    jm = driven(router, prefetch=6)
    identity, _ = router.handshake()  # a reference router: READY after each job
    jm.until(router, lambda: router.count(Ready) >= 2, "a READY per worker process")
    for i in range(2):
        router.request(identity, body("add", i, i))
    jm.until(router, lambda: router.count(Ready) == 2 + 8, "READY for the jobs and the prefetch")
    for i in range(8):
        router.request(identity, body("add", i, i))
    jm.until(router, lambda: jm.jm.jobs == {} and jm.jm.prefetch.value == 0, "done", advance=10.0)
    # The processes' two READYs may still be on their way over loopback (seen
    # once under load: 10 counted): wait for them, then give extras a chance.
    jm.until(router, lambda: router.count(Ready) >= 10 + 2, "READY for the two processes")
    jm.steps(router, 5)
    # Eight jobs finished, but only the two processes' slots were announced again.
    assert router.count(Ready) == 10 + 2
    assert sent(router, Unready) == []


def test_no_prefetch_means_none_however_short_the_jobs(
    router: FakeRouter, driven: Callable[..., Driven]
) -> None:
    jm = driven(router, prefetch=0)
    identity = our_handshake(router)
    for i in range(6):
        router.request(identity, body("add", i, i))
    jm.until(router, lambda: router.count(Done) == 6, "six jobs done")
    jm.steps(router, 5)
    assert (router.count(Ready), sent(router, Unready)) == (2, [])
    assert (jm.jm.prefetch.value, jm.jm.pool.depth, jm.jm.credit.slots) == (0, 1, 2)


def test_a_budget_of_zero_announces_the_whole_prefetch_at_once(
    router: FakeRouter, driven: Callable[..., Driven]
) -> None:
    jm = driven(router, prefetch=3, prefetch_budget=0)
    our_handshake(router)
    jm.until(router, lambda: router.count(Ready) >= 5, "READY for processes and prefetch")
    jm.steps(router, 5)
    assert router.count(Ready) == 5
