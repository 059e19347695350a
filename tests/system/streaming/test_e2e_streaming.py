"""Streaming and REJECT end to end: a real router and job manager
(``python -m django_eventmq``), worker children recording to a SQLite file.

- a long job streams progress to a client that waits, while it runs;
- twenty streaming jobs outstanding from one client thread, read interleaved,
  each getting only its own partials, in order;
- a job the job manager refuses (unregistered, bad body) comes back as REJECT
  with the reason: ``.wait()`` and ``.stream()`` raise ``JobRejected``;
- the last progress is on the job's ``JobResult`` row, while it runs and after;
- a router over its high-water mark with the ``reject`` policy: ``JobRejected``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from django_eventmq.client.handles import JobHandle
from django_eventmq.client.pool import get_client
from django_eventmq.errors import JobRejected, ResultTimeout
from django_eventmq.protocol import Headers, JobBody, new_msgid
from tests.system.streaming import jobs
from tests.system.streaming.conftest import start_router

REPLY = Headers(reply_requested=True)


def is_ordered_subsequence(got: list[Any], expected: list[Any]) -> bool:
    it = iter(expected)
    return all(any(item == candidate for candidate in it) for item in got)


def test_a_long_job_streams_progress_while_it_runs_and_the_row_shows_it(stack, use, tmp_path):
    use(stack)
    release = tmp_path / "release"
    handle = jobs.hold_at.delay(str(release), "one")
    stream = handle.stream(timeout=60)
    # The job is still running (it waits for the release file): this came streamed.
    assert next(stream) == {"at": "one"}
    row = stack.row_when(handle, lambda r: r["progress"] is not None, "progress")
    assert row["status"] == "running"
    assert json.loads(row["progress"]) == {"at": "one"}
    release.touch()
    assert list(stream) == [{"at": "one released"}]
    assert handle.wait(timeout=0) == "released"
    row = stack.row_when(handle, lambda r: r["status"] == "succeeded", "the outcome")
    assert json.loads(row["progress"]) == {"at": "one released"}
    assert json.loads(row["value"]) == "released"


def test_progress_of_a_job_arrives_in_order_then_the_final_value(stack, use):
    use(stack)
    handle = jobs.long_job.delay(6, 0.1)
    parts = list(handle.stream(timeout=60))
    expected = [{"step": n, "of": 6} for n in range(1, 7)]
    assert parts[-1] == expected[-1]
    assert is_ordered_subsequence(parts, expected), parts
    assert handle.wait(timeout=0) == "finished"


def test_twenty_streaming_jobs_outstanding_from_one_thread(stack, use):
    use(stack)
    handles = [jobs.count_up.delay(f"job{n}", 4, 0.1) for n in range(20)]
    streams: dict[str, Iterator[Any]] = {h: h.stream(timeout=60) for h in handles}
    seen: dict[str, list[Any]] = {h: [] for h in handles}
    # One partial from each stream in turn, until every stream has ended.
    while streams:
        for handle, stream in list(streams.items()):
            try:
                seen[handle].append(next(stream))
            except StopIteration:
                del streams[handle]
    # Paced below the rate, so nearly all 80 come through (coalescing under load may merge a few).
    assert sum(len(parts) for parts in seen.values()) > 40
    for n, handle in enumerate(handles):
        expected = [{"label": f"job{n}", "i": i} for i in range(4)]
        assert seen[handle] and seen[handle][-1] == expected[-1], seen[handle]
        assert is_ordered_subsequence(seen[handle], expected), seen[handle]
        assert handle.wait(timeout=0) == {"label": f"job{n}", "total": 4}


def refused_handle(body_text: str) -> JobHandle:
    from django_eventmq.runtime.config import get_settings

    settings = get_settings()
    client = get_client(settings.broker_addr)
    return JobHandle(client.request("default", body_text, REPLY, new_msgid()))


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (
            JobBody(path="tests.system.streaming.jobs", callable="not_a_job").encode(),
            "'tests.system.streaming.jobs.not_a_job' is not registered with @job",
        ),
        (
            '["run", {"path": "tests.system.streaming.jobs", "callable": "1st"}]',
            "job callable must be an identifier",
        ),
    ],
    ids=["unregistered", "bad-body"],
)
def test_a_refused_job_comes_back_as_reject_with_its_reason(stack, use, body, reason):
    use(stack)
    handle = refused_handle(body)
    with pytest.raises(JobRejected) as caught:
        handle.wait(timeout=60)
    assert reason in caught.value.reason
    with pytest.raises(JobRejected, match=re.escape(reason)):
        list(handle.stream(timeout=0))  # a stream of it says the same
    # Recorded as failed, with the refusal as its exception.
    row = stack.row_when(handle, lambda r: r["status"] == "failed", "the refusal")
    assert row["exc_type"] in ("JobNotAllowed", "InvalidJob")
    assert reason in row["exc_message"]


def test_the_routers_own_reject_reaches_wait(db_env, eventmq_settings, tmp_path: Path):
    # No job manager: the first job waits, and the mark (1) is reached.
    router, frontend, _ = start_router(
        tmp_path / "journal.sqlite3", "--high-water-mark", "1", "--hwm-policy", "reject"
    )
    try:
        eventmq_settings(BROKER_ADDR=frontend, ACK_TIMEOUT=5)
        waiting = jobs.count_up.send(
            ("first", 1), headers=Headers(reply_requested=True, guarantee=True)
        )
        refused = jobs.count_up.delay("second", 1)
        with pytest.raises(JobRejected, match="high-water mark"):
            refused.wait(timeout=60)
        with pytest.raises(JobRejected, match="high-water mark"):
            next(refused.stream(timeout=0))
        # The first one was taken: no REJECT for it came before the second's.
        with pytest.raises(ResultTimeout):
            waiting.wait(timeout=0.01)
    finally:
        router.stop()
