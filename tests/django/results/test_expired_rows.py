"""``expired`` rows: written from a job manager's record, read back as
:class:`JobExpired`, and filtered on in the admin."""

from __future__ import annotations

import pytest

from django_eventmq.client.handles import JobHandle
from django_eventmq.errors import JobExpired
from django_eventmq.models.results import JobResult
from django_eventmq.result_recording import record_results
from tests.support import result_record

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/django_eventmq/jobresult/"
ADD = "tests.django.results.jobs.add"


def expired(msgid: str) -> dict:  # type: ignore[type-arg]
    error = {"type": "Expired", "message": "not started before its expiry", "traceback": ""}
    return result_record(msgid, "expired", job=ADD, args=[1, 2], error=error)


def test_an_expired_record_finishes_the_row_and_reads_back_as_job_expired() -> None:
    record_results([result_record("x1", "queued", job=ADD, args=[1, 2])])
    record_results([expired("x1")])
    row = JobResult.objects.get(msgid="x1")
    assert (row.status, row.exc_type, row.is_finished) == ("expired", "Expired", True)
    assert JobHandle("x1").status == "expired"
    with pytest.raises(JobExpired, match="expiry"):
        _ = JobHandle("x1").result
    # A late "running" record of the same attempt does not undo it.
    record_results([result_record("x1", "running", job=ADD, args=[1, 2])])
    assert JobResult.objects.get(msgid="x1").status == "expired"


def test_the_admin_filters_by_expired(admin_client) -> None:  # type: ignore[no-untyped-def]
    record_results([expired("gone-1")])
    record_results([result_record("ran-2", "succeeded", job=ADD, args=[1, 2])])
    page = admin_client.get(CHANGELIST + "?status__exact=expired").content.decode()
    assert "gone-1" in page and "ran-2" not in page
    assert "status__exact=expired" in admin_client.get(CHANGELIST).content.decode()
