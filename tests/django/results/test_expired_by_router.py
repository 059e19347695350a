"""The ``expired`` row a client writes for a job the router dropped unrun (the router has
no database): it never replaces a job manager's row, it finishes the client's own
``queued`` row, and a database that cannot be written does not hide the JobExpired."""

from __future__ import annotations

import logging

import pytest

from django_eventmq.client.handles import settled_value
from django_eventmq.errors import JobExpired
from django_eventmq.models.results import JobResult
from django_eventmq.protocol import Reply, new_msgid
from django_eventmq.protocol.status import EXPIRED_ERROR, JobStatus
from django_eventmq.result_recording import record_expired, record_queued, record_results
from django_eventmq.router.expiry import EXPIRED_PAYLOAD
from tests.support import result_record


def expired_reply(msgid: str) -> Reply:
    return Reply(msgid=new_msgid(), payload=EXPIRED_PAYLOAD, reply_to=msgid)


@pytest.mark.django_db
def test_the_router_dropped_job_gets_an_expired_row_from_its_client() -> None:
    with pytest.raises(JobExpired):
        settled_value("m-1", expired_reply("m-1"))
    row = JobResult.objects.get(msgid="m-1")
    assert (row.status, row.exc_type, row.jobmanager) == (JobStatus.EXPIRED, EXPIRED_ERROR, "")
    assert "expiry" in row.exc_message
    assert (
        settled_value("m-2", Reply(msgid=new_msgid(), payload='{"value": 3}', reply_to="m-2")) == 3
    )
    assert not JobResult.objects.filter(msgid="m-2").exists()  # only expired outcomes


@pytest.mark.django_db
def test_the_clients_queued_row_becomes_expired_and_keeps_what_it_knew() -> None:
    record_queued("m-1", queue="email", job="shop.jobs.send", args=[1])
    record_expired("m-1", "not started before its expiry")
    row = JobResult.objects.get(msgid="m-1")
    assert (row.status, row.queue, row.job, row.args) == ("expired", "email", "shop.jobs.send", [1])


@pytest.mark.django_db
def test_a_job_managers_row_is_kept() -> None:
    error = {"type": EXPIRED_ERROR, "message": "the job manager's words"}
    record_results([result_record("m-1", "expired", job="j", args=[], error=error)])
    record_expired("m-1", "the router's words")
    row = JobResult.objects.get(msgid="m-1")
    assert (row.exc_message, row.jobmanager) == ("the job manager's words", "jm-1")


def test_a_database_that_cannot_be_written_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # No django_db mark: pytest-django refuses the query, as a database down would.
    with caplog.at_level(logging.ERROR, "django_eventmq.client"), pytest.raises(JobExpired):
        settled_value("m-1", expired_reply("m-1"))
    assert "could not record job msgid=m-1 as expired" in caplog.text
