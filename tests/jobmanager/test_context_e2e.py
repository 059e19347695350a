"""``current_job()`` end to end: a real router and job manager (``python -m
django_eventmq``) run jobs that return what their context says; every kind of job
(plain, generator, async) sees its own msgid, queue, attempt and headers, and a
retried job sees its attempt go up and its retries left go down."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from django_eventmq import current_job
from tests.jobs_fixtures import context_jobs
from tests.jobs_fixtures.limits_stack import router_and_jobmanager
from tests.support import wait_for


@pytest.fixture(scope="module")
def frontend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A router and a job manager (two workers) serving the context jobs."""
    journal = tmp_path_factory.mktemp("context-e2e") / "journal.sqlite3"
    with router_and_jobmanager(journal, 2, module=context_jobs.MODULE) as (front, _router):
        yield front


@pytest.fixture
def client_of(eventmq_settings: Any, frontend: str) -> Callable[[], None]:
    def point() -> None:
        eventmq_settings(BROKER_ADDR=frontend, ACK_TIMEOUT=5)

    return point


def test_each_job_sees_its_own_msgid_queue_attempt_and_headers(
    client_of: Callable[[], None],
) -> None:
    client_of()
    handles = [context_jobs.plain.delay(n) for n in range(8)]
    seen = [handle.wait(timeout=60) for handle in handles]
    assert seen == [
        {
            "msgid": str(handle),
            "name": f"{context_jobs.MODULE}.plain",
            "queue": "default",
            "attempt": 1,
            "retries_left": 0,
            "retry_count": 0,
            "timeout": 60,
            "args": [n],
        }
        for n, handle in enumerate(handles)
    ]
    assert current_job() is None  # not in a job here


def test_a_generator_job_and_an_async_job_see_their_own(client_of: Callable[[], None]) -> None:
    client_of()
    counted = context_jobs.counting.delay(1)
    napped = [context_jobs.napping.delay(0.05) for _ in range(4)]
    ran = counted.wait(timeout=60)
    assert ran["first"] == ran["last"]
    assert ran["first"]["msgid"] == str(counted) and ran["first"]["attempt"] == 1
    for handle in napped:
        assert handle.wait(timeout=60)["msgid"] == str(handle)


def test_a_retried_job_sees_its_attempt_and_retries_left(
    client_of: Callable[[], None], tmp_path: Path
) -> None:
    client_of()
    notes = tmp_path / "attempts.jsonl"
    handle = context_jobs.flaky.delay(str(notes))
    final = handle.wait(timeout=60)

    def attempts() -> list[dict[str, Any]]:
        return [json.loads(line) for line in notes.read_text().splitlines()]

    wait_for(lambda: len(attempts()) == 3, 30, "three attempts noted")
    assert [(a["msgid"], a["attempt"], a["retries_left"]) for a in attempts()] == [
        (str(handle), 1, 2),
        (str(handle), 2, 1),
        (str(handle), 3, 0),
    ]
    assert final["attempt"] == 3 and final["retry_count"] == 2


def test_an_eager_job_sees_its_context_too(eventmq_settings: Any) -> None:
    eventmq_settings(EAGER=True, ROUTES={f"{context_jobs.MODULE}.*": "routed"})
    handle = context_jobs.plain.delay(5)
    seen = handle.wait(timeout=0)
    assert seen is not None
    assert (seen["msgid"], seen["queue"], seen["attempt"], seen["args"]) == (
        str(handle),
        "routed",
        1,
        [5],
    )
    assert context_jobs.napping.delay(0).wait(timeout=0)["queue"] == "routed"  # async too
    assert current_job() is None
