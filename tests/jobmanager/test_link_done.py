"""RouterLink.send_done: the DONE of a finished job, its frames built straight from
its fields. The same frames (a fresh msgid aside), the same credit, and the same
refusals as ``link.send(link.session.done(...))``, which it replaces."""

from __future__ import annotations

import pytest

from django_eventmq.errors import ProtocolError
from django_eventmq.jobmanager.link import RouterLink
from django_eventmq.protocol import Done, decode
from django_eventmq.protocol.status import JobStatus
from tests.fake_router import FakeRouter


def _sent(link: RouterLink[object]) -> list[list[bytes]]:
    """What the link keeps for the end of the turn (a bundling router)."""
    unsent = list(link._unsent)
    return unsent


@pytest.mark.parametrize(
    ("job_msgid", "status", "payload"),
    [
        ("j-1", JobStatus.OK, "null"),
        ("j-2", JobStatus.FAILED, ""),
        ("é-\U0001f600" * 40, JobStatus.RETRY, '{"attempt": 2}'),
        ("j,4\n", JobStatus.REFUSED, "a,b\nc\x00" * 50),
        ("j-5", "died", "x"),  # a plain str status, as Done takes it
    ],
)
def test_the_same_frames_and_credit_as_the_done_message(
    router: FakeRouter, link: RouterLink[object], job_msgid: str, status: str, payload: str
) -> None:
    session = link.session
    credit = session.credit
    link.send_done(job_msgid, status, payload)
    link.send(session.done(job_msgid, status, payload))
    assert session.credit == credit + 2
    fast, slow = _sent(link)
    assert fast[:3] + fast[4:] == slow[:3] + slow[4:]
    assert fast[3] and fast[3] != slow[3]  # a fresh msgid of its own
    message = decode(fast)
    assert message == Done(
        msgid=fast[3].decode(), job_msgid=job_msgid, status=status, payload=payload
    )
    link.flush()
    router.wait_count(Done, 2)
    assert [m for _, m in router.of(Done)][-2] == message


@pytest.mark.parametrize(
    ("job_msgid", "status"),
    [("", JobStatus.OK), ("j-1", JobStatus.RUNNING), ("j-1", "bogus")],
)
def test_a_bad_done_is_refused_as_the_done_message_is(
    link: RouterLink[object], job_msgid: str, status: str
) -> None:
    session = link.session
    credit = session.credit
    with pytest.raises(ProtocolError) as slow:
        session.done(job_msgid, status, "null")
    with pytest.raises(ProtocolError) as fast:
        link.send_done(job_msgid, status, "null")
    assert fast.value.reason == slow.value.reason
    assert session.credit == credit + 2  # session.done() counts the slot before it checks
    assert _sent(link) == []


def test_not_in_done_mode_it_is_refused_as_the_done_message_is(
    link: RouterLink[object],
) -> None:
    link.close()
    with pytest.raises(ProtocolError) as slow:
        link.session.done("j-1", JobStatus.OK, "null")
    with pytest.raises(ProtocolError) as fast:
        link.send_done("j-1", JobStatus.OK, "null")
    assert fast.value.reason == slow.value.reason
