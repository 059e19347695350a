"""Async jobs run at once in one worker process (ASYNC_CONCURRENCY), with a real
router and job manager (``python -m django_eventmq``, ``--concurrency 1``): they
overlap, each runs once, a timeout or a cancel ends only its own job, and a
plain job still runs alone."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from django_eventmq.errors import JobError
from tests.jobs_fixtures import overlap
from tests.jobs_fixtures.limits_stack import pointer, router_and_jobmanager
from tests.support import wait_for


@pytest.fixture(scope="module")
def frontend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A router and a job manager with ONE worker process serving :mod:`overlap`."""
    journal = tmp_path_factory.mktemp("async-concurrency") / "journal.sqlite3"
    with router_and_jobmanager(
        journal, concurrency=1, module=overlap.MODULE, extra=("--async-concurrency", "100")
    ) as (front, _router):
        yield front


@pytest.fixture
def client(eventmq_settings: Any, frontend: str) -> Callable[[], None]:
    return pointer(eventmq_settings, frontend)


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most intervals that were open at one moment."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    best = now = 0
    for _, step in edges:
        now += step
        best = max(best, now)
    return best


def runs(marker: Path) -> Counter[str]:
    return Counter(marker.read_text().split()) if marker.exists() else Counter()


def ran_through(moment: float, others: list[Any], marker: Path, ended: str) -> None:
    """The jobs of ``others`` ran through ``moment`` (when job ``ended`` was seen to
    end) in one process and succeeded, and every job ran once: stopping the process
    would have ended them too."""
    spans = [handle.wait(timeout=120) for handle in others]
    assert len({pid for _, _, pid in spans}) == 1
    assert all(start < moment < end for start, end, _ in spans)
    assert runs(marker) == Counter({ended: 1, **{f"nap{n}": 1 for n in range(len(others))}})


def test_fifty_async_jobs_run_at_once_in_one_process(
    client: Callable[[], None], tmp_path: Path
) -> None:
    client()
    marker = tmp_path / "runs"
    handles = [overlap.nap.delay(3, str(marker), f"nap{n}") for n in range(50)]
    spans = [handle.wait(timeout=180) for handle in handles]
    assert len({pid for _, _, pid in spans}) == 1  # one worker process ran them all
    # One at a time they would never overlap (that took 52 s for 50 of 1 s).
    assert most_at_once([(start, end) for start, end, _ in spans]) > 40
    # From the first on: the one that came first did not run alone (as it did when
    # it came before the worker said which jobs are async).
    first_end = min(spans)[1]
    assert sum(1 for start, _, _ in spans if start < first_end) > 40
    assert runs(marker) == Counter({f"nap{n}": 1 for n in range(50)})  # each ran once


def test_the_timeout_of_one_async_job_ends_only_that_job(
    client: Callable[[], None], tmp_path: Path
) -> None:
    client()
    marker = tmp_path / "runs"
    stuck = overlap.nap.send((120, str(marker), "stuck"), headers={"timeout": 2})
    others = [overlap.nap.delay(15, str(marker), f"nap{n}") for n in range(5)]
    with pytest.raises(JobError) as failed:
        stuck.wait(timeout=120)
    assert failed.value.exc_type == "TimeoutError"
    ran_through(time.time(), others, marker, "stuck")


@pytest.mark.django_db  # .cancel() marks a queued row of the results table too
def test_cancelling_a_running_async_job_ends_only_that_job(
    client: Callable[[], None], tmp_path: Path
) -> None:
    client()
    marker = tmp_path / "runs"
    victim = overlap.nap.delay(120, str(marker), "victim")
    others = [overlap.nap.delay(25, str(marker), f"nap{n}") for n in range(5)]
    # All of them running before the cancel, so they can only run through it; their
    # 25 s leave a loaded machine room to see the cancelled job end before they do.
    wait_for(lambda: len(runs(marker)) == 6, 60, "the job to cancel and the others running")
    victim.cancel()
    with pytest.raises(JobError) as failed:
        victim.wait(timeout=60)
    assert failed.value.exc_type == "Cancelled"
    ran_through(time.time(), others, marker, "victim")


def test_a_plain_job_runs_alone_between_async_jobs(
    client: Callable[[], None], tmp_path: Path
) -> None:
    client()
    marker = tmp_path / "runs"
    before = [overlap.nap.delay(2, str(marker), f"before{n}") for n in range(10)]
    plain = overlap.hold.delay(1, str(marker), "plain")
    after = [overlap.nap.delay(2, str(marker), f"after{n}") for n in range(10)]
    start, end, pid = plain.wait(timeout=120)
    naps = [handle.wait(timeout=120) for handle in before + after]
    assert {p for _, _, p in naps} == {pid}
    # No async job ran while the plain one held the process.
    assert all(nap_end <= start or nap_start >= end for nap_start, nap_end, _ in naps)
    # ... and async jobs still ran together on either side of it.
    assert most_at_once([(s, e) for s, e, _ in naps]) >= 5
    assert sum(runs(marker).values()) == 21


def test_an_async_job_that_blocks_the_loop_past_its_timeout_stops_its_process(
    client: Callable[[], None], tmp_path: Path
) -> None:
    """It never sees its cancel: after the grace its process is stopped, and the jobs
    beside it (held up all along) are reported lost, so the router runs them again."""
    client()
    marker = tmp_path / "runs"
    others = [overlap.nap.delay(20, str(marker), f"nap{n}") for n in range(3)]
    wait_for(lambda: len(runs(marker)) == 3, 60, "the naps running")
    stuck = overlap.blocks.send((60, str(marker), "stuck"), headers={"timeout": 1})
    with pytest.raises(JobError) as failed:
        stuck.wait(timeout=120)
    assert failed.value.exc_type == "TimeoutError"
    spans = [handle.wait(timeout=120) for handle in others]
    assert len({pid for _, _, pid in spans}) == 1
    # The naps were running when their process was stopped: each ran again.
    assert runs(marker) == Counter({"stuck": 1, **{f"nap{n}": 2 for n in range(3)}})


def test_async_jobs_running_at_once_each_see_their_own_current_job(
    client: Callable[[], None], tmp_path: Path
) -> None:
    client()
    marker = tmp_path / "runs"
    handles = [overlap.whose.delay(str(marker), f"whose{n}", 2) for n in range(2)]
    seen = [handle.wait(timeout=120) for handle in handles]
    assert len({ran["pid"] for ran in seen}) == 1  # one worker process, on one loop
    assert all(ran["together"] for ran in seen)  # each awaited while the other ran
    # Each saw its own job before the other started and after it had: not the one
    # started last (one context for the loop), nor none (the task's own context).
    assert [(ran["before"], ran["after"]) for ran in seen] == [
        (str(handle), str(handle)) for handle in handles
    ]
    assert runs(marker) == Counter({"whose0": 1, "whose1": 1})
