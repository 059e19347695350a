"""``delay_on_commit()`` through the outbox table, against a router in a thread.

Real transactions (``transaction=True``). The row is written in the caller's
transaction, sent at the commit with ``guarantee`` and deleted once the router
acknowledged it; a send that fails leaves the row for the relay (the processes'
side is ``tests/system/e2e/test_outbox_e2e.py``).
"""

from __future__ import annotations

import pytest
from django.db import transaction

from django_eventmq.errors import ConfigurationError, JobNotSent, ResultTimeout
from django_eventmq.models import OutboxJob
from django_eventmq.protocol import Ack, Reject, new_msgid, parse_headers
from tests.django.results import jobs
from tests.django.results.outbox_jobs import boxed, unboxed
from tests.support import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


class Rollback(Exception):
    pass


def _ack(request, count):
    return [Ack(msgid=new_msgid(), ack_msgid=request.msgid)]


def _refuse(reason):
    def answer(request, count):
        return [Reject(msgid=new_msgid(), job_msgid=request.msgid, reason=reason)]

    return answer


def test_the_row_is_written_in_the_transaction_and_deleted_once_acknowledged(thread_router):
    router = thread_router(_ack)
    with transaction.atomic():
        handle = boxed.delay_on_commit(7)
        row = OutboxJob.objects.get(msgid=handle)
        assert router.requests() == []
    assert (row.queue, row.body) == ("default", boxed.encode_body((7,), {}))
    assert parse_headers(row.headers).guarantee
    [request] = router.requests()
    assert (request.msgid, request.body_text, request.headers.guarantee) == (
        handle,
        row.body,
        True,
    )
    assert not OutboxJob.objects.exists()
    assert handle.status is None  # sent: the results table's word


def test_a_rollback_leaves_no_row_and_sends_nothing(thread_router):
    router = thread_router(_ack)
    with pytest.raises(Rollback), transaction.atomic():
        handle = boxed.delay_on_commit(1)
        raise Rollback
    assert not OutboxJob.objects.exists()
    assert handle.status == "rolled_back"
    assert router.requests() == []


def test_a_router_that_is_full_leaves_the_row_for_the_relay(thread_router, caplog):
    router = thread_router(_refuse("router is full: over its high-water mark"))
    caplog.set_level("WARNING", "django_eventmq")
    with transaction.atomic():
        handle = boxed.delay_on_commit(2)
    assert [r.msgid for r in router.requests()] == [handle]
    assert list(OutboxJob.objects.values_list("msgid", flat=True)) == [handle]
    said = [r.getMessage() for r in caplog.records if handle in r.getMessage()]
    assert len(said) == 1 and "outbox row stays" in said[0], said
    # Not "not_sent": the relay sends it; the table will say how it went.
    assert handle.status is None
    with pytest.raises(ResultTimeout, match="its outbox row is sent by a scheduler"):
        handle.wait(timeout=60)


def test_a_job_refused_for_good_loses_its_row(thread_router, caplog):
    thread_router(_refuse("job not allowed on this queue"))
    caplog.set_level("ERROR", "django_eventmq")
    with transaction.atomic():
        handle = boxed.delay_on_commit(3)
    assert not OutboxJob.objects.exists()
    assert handle.status == "not_sent"
    with pytest.raises(JobNotSent, match="job not allowed"):
        handle.wait(timeout=60)


def test_outside_a_transaction_a_failed_send_is_not_raised_and_the_row_stays(thread_router):
    # Raised, the caller might send the job again: twice, as the relay sends the row.
    thread_router(_refuse("router cannot store jobs now (its journal: disk full)"))
    handle = boxed.delay_on_commit(4)
    assert list(OutboxJob.objects.values_list("msgid", flat=True)) == [handle]


def test_the_setting_puts_every_job_through_the_outbox_but_those_that_opt_out(thread_router):
    router = thread_router(_ack, OUTBOX=True)
    kept: list[str] = []
    with transaction.atomic():
        plain = jobs.important.delay_on_commit(1)
        out = unboxed.delay_on_commit(2)
        kept = list(OutboxJob.objects.values_list("msgid", flat=True))
    assert kept == [plain]
    # The unboxed job is sent without waiting for an answer: it may come later.
    wait_for(lambda: {r.msgid for r in router.requests()} == {plain, out}, 10, "both jobs")
    assert not OutboxJob.objects.exists()


def test_the_outbox_option_takes_a_bool():
    from django_eventmq import job

    def f() -> None: ...

    f.__module__, f.__qualname__ = __name__, "f"
    with pytest.raises(ConfigurationError, match="outbox= takes True, False or None"):
        job(outbox="yes")(f)  # type: ignore[call-overload]


def test_the_admin_lists_a_row_left_and_may_delete_it_but_not_change_it(admin_client):
    from django.urls import reverse
    from django.utils import timezone

    OutboxJob.objects.create(
        msgid="left-behind", queue="email", headers="guarantee", body="[]", created=timezone.now()
    )
    page = admin_client.get(reverse("admin:django_eventmq_outboxjob_changelist"))
    assert page.status_code == 200 and "left-behind" in page.content.decode()
    assert "/admin/django_eventmq/outboxjob/add/" not in page.content.decode()
    change = reverse("admin:django_eventmq_outboxjob_change", args=["left-behind"])
    assert admin_client.post(change, {"queue": "other"}).status_code == 403
    delete = reverse("admin:django_eventmq_outboxjob_delete", args=["left-behind"])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 302
    assert not OutboxJob.objects.exists()
