"""``guarantee``: .delay() returns once the router ACKs, resending the same msgid until it does."""

from __future__ import annotations

import pytest

from django_eventmq.errors import BrokerUnavailable
from django_eventmq.protocol import Ack, Reply, new_msgid
from tests.django.results import jobs
from tests.django.results.conftest import ack


def test_delay_returns_once_acknowledged(thread_router):
    router = thread_router(lambda request, count: [ack(request)], ACK_TIMEOUT=5, ACK_RETRIES=0)
    handle = jobs.important.delay(7)
    assert [r.msgid for r in router.received] == [handle]
    assert router.received[0].headers.guarantee


def test_unacknowledged_sends_are_repeated_with_the_same_msgid(thread_router):
    # The router "loses" the first two copies: no ACK for them.
    router = thread_router(
        lambda request, count: [ack(request)] if count == 3 else [],
        ACK_TIMEOUT=0.2,
        ACK_RETRIES=3,
    )
    handle = jobs.important.delay(8)
    assert [r.msgid for r in router.received] == [handle] * 3
    assert len({r.body_text for r in router.received}) == 1


def test_no_ack_at_all_raises_broker_unavailable(thread_router):
    router = thread_router(lambda request, count: [], ACK_TIMEOUT=0.1, ACK_RETRIES=2)
    with pytest.raises(BrokerUnavailable, match="did not acknowledge") as caught:
        jobs.important.delay(9)
    msgids = {r.msgid for r in router.received}
    assert len(router.received) == 3 and len(msgids) == 1
    assert msgids.pop() in str(caught.value)


def test_an_ack_for_another_message_does_not_count(thread_router):
    router = thread_router(
        lambda request, count: (
            [Ack(msgid=new_msgid(), ack_msgid="someone-else")]
            + ([ack(request)] if count == 2 else [])
        ),
        ACK_TIMEOUT=0.2,
        ACK_RETRIES=1,
    )
    jobs.important.delay(10)
    assert len(router.received) == 2


def test_the_reference_routers_receipt_counts_as_an_ack(thread_router):
    # eventmq 0.3.13 answers a forwarded REQUEST with REPLY(payload=<msgid>).
    router = thread_router(
        lambda request, count: [Reply(msgid=new_msgid(), payload=request.msgid)],
        ACK_TIMEOUT=5,
        ACK_RETRIES=0,
    )
    jobs.important.delay(11)
    assert len(router.received) == 1


def test_guarantee_and_reply_the_outcome_still_reaches_wait(thread_router):
    thread_router(
        lambda request, count: [
            ack(request),
            Reply(msgid=new_msgid(), payload='{"value": 120}', reply_to=request.msgid),
        ],
        ACK_TIMEOUT=5,
        ACK_RETRIES=0,
    )
    handle = jobs.important_with_reply.delay(12)
    assert handle.wait(timeout=10) == 120
