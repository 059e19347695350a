"""runtime/job_context.py: the context line a child gets, and current_job() per job,
concurrent async jobs included (each task keeps the context it was made in)."""

from __future__ import annotations

import asyncio

import pytest

from django_eventmq import JobContext, current_job
from django_eventmq.jobmanager import child
from django_eventmq.protocol import JobBody
from django_eventmq.runtime import job_context


def _running(line: bytes, *args: object) -> job_context.Running:
    return job_context.Running(line, JobBody(path="app.jobs", callable="send", args=args))


@pytest.mark.parametrize(
    ("msgid", "queue", "headers"),
    [
        ("m-1", "email", "reply-requested,retry-count:3,attempt:2"),
        ("tab\there", "new\nline", "x-note:a\x1eb"),  # sent as JSON, read back the same
        ("", "default", ""),
    ],
)
def test_the_context_line_round_trips_through_a_job_frame(
    msgid: str, queue: str, headers: str
) -> None:
    line = job_context.encode_line(msgid, queue, 2, headers)
    frame = child.encode_job(5, '["run",{}]', 3, b"", line)
    seq, soft, body, trace, got = child.decode_job_frame(frame)
    assert (seq, soft, body, trace, got) == (b"5", 3, b'["run",{}]', b"", line)
    context = _running(got, 1).context()
    assert (context.msgid, context.queue, context.attempt) == (msgid, queue, 2)
    assert context.name == "app.jobs.send" and context.args == (1,)


def test_a_frame_without_a_context_line_still_reads() -> None:
    assert child.decode_job_frame(b"J7:3\n[]") == (b"7", 3, b"[]", b"", b"")
    context = _running(b"").context()
    assert (context.msgid, context.attempt, context.retries_left) == ("", 1, 0)


def test_retries_left_counts_down_to_zero() -> None:
    line = job_context.encode_line("m", "q", 1, "retry-count:2")
    assert _running(line).context().retries_left == 2
    line = job_context.encode_line("m", "q", 3, "retry-count:2")
    assert _running(line).context().retries_left == 0


def test_current_job_is_the_job_entered_and_none_after() -> None:
    assert current_job() is None
    token = job_context.enter(_running(job_context.encode_line("m-9", "q", 1, "")))
    try:
        context = current_job()
        assert isinstance(context, JobContext) and context.msgid == "m-9"
        assert current_job() is context  # built once
    finally:
        job_context.leave(token)
    assert current_job() is None


def test_concurrent_async_jobs_each_see_their_own() -> None:
    """Tasks made while each job is current keep it across awaits that interleave."""
    loop = asyncio.new_event_loop()
    gate = asyncio.Event()

    async def job(n: int) -> list[str]:
        seen = []
        for _ in range(3):
            context = current_job()
            assert context is not None
            seen.append(context.msgid)
            await asyncio.sleep(0)
        await gate.wait()  # every task is started before any ends
        context = current_job()
        assert context is not None
        return [*seen, context.msgid]

    tasks = []
    try:
        for n in range(5):
            token = job_context.enter(_running(job_context.encode_line(f"m-{n}", "q", 1, "")))
            try:
                tasks.append(loop.create_task(job(n)))
            finally:
                job_context.leave(token)
        loop.call_soon(gate.set)
        done = loop.run_until_complete(asyncio.gather(*tasks))
    finally:
        loop.close()
    assert done == [[f"m-{n}"] * 4 for n in range(5)]
    assert current_job() is None
