"""Async jobs end to end: a real router and job manager (``python -m django_eventmq``),
a client that sends with ``.delay()`` as for any job: the value comes back to
``.wait()``, progress to ``.stream()``; with ``EAGER`` the job runs inline."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.jobs_fixtures import limits
from tests.jobs_fixtures.limits_stack import router_and_jobmanager


@pytest.fixture(scope="module")
def frontend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A router and a job manager (two workers) serving the limits fixtures."""
    journal = tmp_path_factory.mktemp("async-e2e") / "journal.sqlite3"
    with router_and_jobmanager(journal, concurrency=2) as (front, _router):
        yield front


@pytest.fixture
def client_of(eventmq_settings: Any, frontend: str) -> Callable[[], None]:
    def point() -> None:
        eventmq_settings(BROKER_ADDR=frontend, ACK_TIMEOUT=5)

    return point


def test_delay_of_an_async_job_returns_its_value_to_wait(client_of: Callable[[], None]) -> None:
    client_of()
    handles = [limits.async_multiply.delay(n, 7) for n in range(10)]
    assert [handle.wait(timeout=60) for handle in handles] == [n * 7 for n in range(10)]


def test_an_async_job_streams_its_progress(client_of: Callable[[], None]) -> None:
    client_of()
    handle = limits.async_counts.delay(4, 0.1)
    parts = list(handle.stream(timeout=60))
    assert parts and parts[-1] == 4  # the last report is never coalesced away
    assert parts == sorted(parts) and set(parts) <= {1, 2, 3, 4}
    assert handle.wait(timeout=0) == "counted"


def test_an_async_job_sent_while_eager_runs_inline(eventmq_settings: Any) -> None:
    eventmq_settings(EAGER=True)
    assert limits.async_multiply.delay(6, 7).wait(timeout=0) == 42
