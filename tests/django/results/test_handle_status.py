"""A handle that read its job's outcome knows the job's status (and result).

The results table is written by job managers in batches, so right after
``.wait()`` returned it may not have the job's row yet: ``.status`` and
``.result`` then say what the outcome said, without a query. The tests
without ``django_db`` show that no query is made (pytest-django refuses one).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from django_eventmq.errors import JobError, JobRejected
from django_eventmq.protocol import Reject, Reply, new_msgid
from tests.django.results import jobs
from tests.django.results.conftest import receive_request
from tests.support import Proc, python_module, tcp_addr
from tests.system.chaos.support import start_router


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Our router and job manager processes (no Django); yields the router's frontend."""
    frontend, backend, admin = tcp_addr(), tcp_addr(), tcp_addr()
    journal = tmp_path_factory.mktemp("status") / "journal.db"
    router = start_router(frontend, backend, admin, journal)
    jobmanager = Proc(
        python_module(
            "jobmanager", "--broker", backend, "--concurrency", "2",
            "--job-module", "tests.django.results.jobs",
        )
    )  # fmt: skip
    try:
        jobmanager.wait_output(r"jobmanager connected to")
        yield frontend
    finally:
        jobmanager.stop()
        router.stop()


def test_after_wait_returned_a_value_the_status_is_succeeded(stack, eventmq_settings):
    eventmq_settings(BROKER_ADDR=stack)
    handle = jobs.add.delay(2, 3)
    assert handle.wait(timeout=30) == 5
    assert handle.status == "succeeded"
    assert handle.result == 5


def test_after_wait_raised_the_status_says_how_the_job_ended(stack, eventmq_settings, tmp_path):
    eventmq_settings(BROKER_ADDR=stack)
    failed = jobs.explode.delay("nope")
    timed_out = jobs.sleeps_too_long.delay(str(tmp_path / "log"))  # timeout=1
    with pytest.raises(JobError, match="KeyError"):
        failed.wait(timeout=30)
    with pytest.raises(JobError, match="TimeoutError"):
        timed_out.wait(timeout=30)
    assert (failed.status, timed_out.status) == ("failed", "timed_out")
    with pytest.raises(JobError) as caught:
        failed.result  # noqa: B018 - the property raises
    assert (caught.value.exc_type, caught.value.message) == ("KeyError", "'nope'")


def test_after_stream_ended_the_status_is_known(stack, eventmq_settings):
    eventmq_settings(BROKER_ADDR=stack)
    handle = jobs.add.delay(1, 1)
    assert list(handle.stream(timeout=30)) == []
    assert (handle.status, handle.result) == ("succeeded", 2)


def _answer(broker, payload: dict | None = None, reject: str = "") -> object:
    """Queue a job to the raw ``broker``, answer it, and read the outcome with ``.wait()``."""
    handle = jobs.add.delay(1, 1)
    identity, request = receive_request(broker)
    if reject:
        broker.send_to(identity, Reject(msgid=new_msgid(), job_msgid=request.msgid, reason=reject))
    else:
        text = json.dumps(payload)
        broker.send_to(identity, Reply(msgid=new_msgid(), payload=text, reply_to=request.msgid))
    with pytest.raises((JobError, JobRejected)):
        handle.wait(timeout=10)
    return handle


def test_a_cancelled_or_rejected_job_s_handle_says_so(broker):
    # What our job manager answers for a cancelled job (outcomes.cancelled_payload).
    cancelled = _answer(
        broker,
        {"value": "Cancelled", "error": {"type": "Cancelled", "message": "the job was cancelled"}},
    )
    rejected = _answer(broker, reject="queue 'default' is full")
    raised_timeout = _answer(
        broker, {"value": "slow disk", "error": {"type": "TimeoutError", "message": "slow disk"}}
    )
    assert cancelled.status == "cancelled"
    assert rejected.status == "rejected"
    assert raised_timeout.status == "failed"  # the job raised TimeoutError: not killed
    with pytest.raises(JobRejected, match="is full"):
        rejected.result  # noqa: B018


@pytest.mark.django_db
def test_a_handle_that_read_nothing_asks_the_table(broker):
    handle = jobs.add.delay(1, 1)
    receive_request(broker)
    assert handle.status is None  # no row, and no outcome read
