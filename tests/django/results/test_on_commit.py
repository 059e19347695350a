""".delay_on_commit(): sent when the transaction commits, never when it rolls back.

Real transactions (``transaction=True``: the test is not wrapped in one) and a
raw ROUTER as the router.
"""

from __future__ import annotations

import pytest
from django.db import transaction

from django_eventmq.errors import ConfigurationError, JobNotSent, ResultTimeout, SerializationError
from django_eventmq.models.results import JobResult
from django_eventmq.runtime import hooks
from tests.django.results import jobs
from tests.django.results.conftest import receive_request

pytestmark = pytest.mark.django_db(transaction=True)


class Rollback(Exception):
    pass


def test_sent_after_commit_not_before(broker):
    with transaction.atomic():
        JobResult.objects.create(
            msgid="row-in-tx", created="2026-01-01T00:00Z", updated="2026-01-01T00:00Z"
        )
        handle = jobs.add.delay_on_commit(1, 2)
        assert not broker.poll(100), "sent before the transaction committed"
    _identity, request = receive_request(broker)
    assert request.msgid == handle
    assert JobResult.objects.filter(msgid="row-in-tx").exists()


def test_never_sent_when_rolled_back(broker):
    with pytest.raises(Rollback), transaction.atomic():
        doomed = jobs.add.delay_on_commit(1, 2)
        raise Rollback
    # Whatever the router receives next is the job sent after the rollback.
    sentinel = jobs.add.delay(3, 4)
    _identity, request = receive_request(broker)
    assert request.msgid == sentinel != doomed
    assert not broker.poll(200)


def test_the_handle_of_a_job_its_rollback_dropped_says_it_was_never_sent(broker):
    # Its .wait() waited out its timeout (or for ever) for a job no router saw.
    with pytest.raises(Rollback), transaction.atomic():
        doomed = jobs.add.delay_on_commit(1, 2)
        quiet = jobs.fire_and_forget.delay_on_commit(3)
        raise Rollback
    with pytest.raises(JobNotSent, match=r"never sent: the transaction .* rolled back") as exc:
        doomed.wait(timeout=60)
    assert exc.value.msgid == doomed
    with pytest.raises(JobNotSent):
        list(doomed.stream(timeout=60))
    with pytest.raises(JobNotSent):
        doomed.result  # noqa: B018 - the property raises
    assert doomed.status == quiet.status == "rolled_back"
    with pytest.raises(JobNotSent):
        quiet.wait(timeout=60)  # no reply_requested: the lost send matters more
    assert not broker.poll(100)


def test_in_an_open_transaction_wait_says_the_commit_has_not_come(broker):
    # A savepoint's rollback drops its job; the outer transaction's job waits for
    # the commit, which cannot come while this thread waits: both raise at once.
    with transaction.atomic():
        kept = jobs.add.delay_on_commit(1, 1)
        with pytest.raises(Rollback), transaction.atomic():
            dropped = jobs.add.delay_on_commit(2, 2)
            raise Rollback
        with pytest.raises(ResultTimeout, match="which it has not yet"):
            kept.wait(timeout=60)
        with pytest.raises(JobNotSent, match="rolled back"):
            dropped.wait(timeout=60)
        assert kept.status is None and dropped.status == "rolled_back"
    _identity, request = receive_request(broker)
    assert request.msgid == kept and kept.status is None  # sent: the table's word


def test_nested_savepoint_rollback_drops_only_its_jobs(broker):
    with transaction.atomic():
        kept = jobs.add.delay_on_commit(1, 1)
        with pytest.raises(Rollback), transaction.atomic():
            jobs.add.delay_on_commit(2, 2)
            raise Rollback
    _identity, request = receive_request(broker)
    assert request.msgid == kept
    assert not broker.poll(200)


def test_outside_a_transaction_it_is_sent_at_once(broker):
    handle = jobs.add.delay_on_commit(5, 6)
    _identity, request = receive_request(broker)
    assert request.msgid == handle
    assert '"args":[5,6]' in request.body_text


def test_bad_arguments_fail_at_the_call_not_at_commit(broker):
    with transaction.atomic(), pytest.raises(SerializationError):
        jobs.add.delay_on_commit(object(), 1)


def test_the_handle_waits_for_the_outcome_after_commit(broker):
    from django_eventmq.protocol import Reply, new_msgid

    with transaction.atomic():
        handle = jobs.add.delay_on_commit(2, 2)
    identity, request = receive_request(broker)
    broker.send_to(
        identity, Reply(msgid=new_msgid(), payload='{"value": 4}', reply_to=request.msgid)
    )
    assert handle.wait(timeout=10) == 4


def test_without_the_django_app_it_says_what_is_missing(broker, monkeypatch):
    monkeypatch.setattr(hooks._installed, "on_commit", None)
    with pytest.raises(ConfigurationError, match="INSTALLED_APPS"):
        jobs.add.delay_on_commit(1, 2)


def test_a_send_that_fails_at_commit_is_said_and_the_next_ones_still_go(thread_router, caplog):
    """Three jobs queued in one transaction; at commit the router refuses the first.
    That one is said in the log, with its msgid and the reason; the two after it
    are sent all the same (a raise out of the first callback dropped them
    silently, and every later on-commit callback of the transaction with them)."""
    from django_eventmq.protocol import Ack, Reject, new_msgid

    refused: list[str] = []

    def answer(request, count):
        if not refused:
            refused.append(request.msgid)
            return [Reject(msgid=new_msgid(), job_msgid=request.msgid, reason="router is full")]
        return [Ack(msgid=new_msgid(), ack_msgid=request.msgid)]

    router = thread_router(answer)
    caplog.set_level("ERROR", "django_eventmq")
    with transaction.atomic():
        handles = [jobs.important.delay_on_commit(n) for n in range(3)]
    assert [r.msgid for r in router.requests()] == handles
    assert refused == [handles[0]]
    said = [r.getMessage() for r in caplog.records if handles[0] in r.getMessage()]
    assert len(said) == 1 and "router is full" in said[0], said
    assert [handle.status for handle in handles] == ["not_sent", None, None]
    with pytest.raises(JobNotSent, match=r"not sent when its transaction committed \(JobRej"):
        handles[0].wait(timeout=60)


def test_a_workflow_whose_first_stage_fails_at_commit_is_failed_and_the_rest_still_go(
    thread_router, caplog
):
    from django_eventmq import chain
    from django_eventmq.models import Workflow
    from django_eventmq.protocol import Ack, Reject, new_msgid
    from tests.system.e2e import workflow_jobs as wj

    def answer(request, count):
        if request.queue == "default" and "workflow" in request.body_text:
            return [Reject(msgid=new_msgid(), job_msgid=request.msgid, reason="router is full")]
        return [Ack(msgid=new_msgid(), ack_msgid=request.msgid)]

    router = thread_router(answer)
    caplog.set_level("ERROR", "django_eventmq")
    with transaction.atomic():
        flow = chain(wj.add.s(1, 2), wj.double.s()).delay()
        after = jobs.important.delay_on_commit(7)
    assert after in [r.msgid for r in router.requests()]
    row = Workflow.objects.get(workflow_id=flow.workflow_id)
    assert row.status == "failed" and "router is full" in row.exc_message
    said = [r.getMessage() for r in caplog.records if flow.workflow_id in r.getMessage()]
    assert len(said) == 1 and "its row says FAILED" in said[0], said


def test_with_eager_the_handle_gets_the_value_when_the_transaction_commits(eventmq_settings):
    """EAGER runs a delay_on_commit job at the commit: its handle's .wait() gives the
    value then (it polled a router that is not there, for ever); before the commit
    it says why there is nothing yet."""
    from django_eventmq.errors import ResultTimeout

    eventmq_settings(EAGER=True)
    with transaction.atomic():
        handle = jobs.add.delay_on_commit(2, 3)
        assert handle.status == "queued"
        with pytest.raises(ResultTimeout, match="captureOnCommitCallbacks"):
            handle.wait(timeout=0.1)
    assert handle.wait(timeout=5) == 5
    assert handle.status == "succeeded"


def test_with_eager_a_job_that_raises_at_the_commit_raises_out_of_it(eventmq_settings):
    """EAGER runs the job at the commit; a job that raises there reaches the caller, as
    with .delay() (docs/retries.md), and is not said to be "not sent"."""
    eventmq_settings(EAGER=True)
    with pytest.raises(KeyError, match="boom"), transaction.atomic():
        handle = jobs.explode.delay_on_commit("boom")
    assert handle.status == "failed"
    with pytest.raises(KeyError, match="boom"):
        handle.wait(timeout=1)
