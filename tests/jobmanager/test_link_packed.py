"""What the link makes of one-frame messages from the router, and of the jobs in a
bundle from it: a packed REQUEST straight to its Request (codec.packed_request), a
bundled job's plain frames too (codec.plain_request), anything else unpacked if
packed and decoded; either way the same message, or the same log and drop, as
decode gives."""

from __future__ import annotations

import logging
import time

import pytest

from django_eventmq.errors import ProtocolError
from django_eventmq.jobmanager.link import RouterLink
from django_eventmq.protocol import Cancel, Headers, Message, Request, decode, encode
from django_eventmq.protocol.bundle import bundle
from django_eventmq.protocol.frame_fields import request_frames
from django_eventmq.protocol.packed import pack, pack_request, unpack
from tests.fake_router import FakeRouter
from tests.support import wait_for

JOB = Request(
    msgid="j-1",
    queue="default",
    headers=Headers(reply_requested=True, retry_count=2),
    body_text='["run", {"callable": "add", "args": ["é", 1]}]',
)


def _read(link: RouterLink[object], n: int) -> list[Message]:
    """The next ``n`` messages the link hands out (heartbeats aside)."""
    got: list[Message] = []

    def enough() -> bool:
        got.extend(m for m in link.messages(time.monotonic()) if m.command != "HEARTBEAT")
        return len(got) >= n

    wait_for(enough, what=f"{n} message(s) from the router")
    return got


def _send(router: FakeRouter, link: RouterLink[object], *frames: bytes) -> None:
    assert link.channel is not None
    for frame in frames:
        router.send_frames(link.channel.identity, [frame])


def test_a_packed_request_gives_the_request_decode_gives(
    router: FakeRouter, link: RouterLink[object]
) -> None:
    frame = pack(encode(JOB))
    cancel = Cancel(msgid="c-1", job_msgid="j-1")
    _send(router, link, frame, pack(encode(cancel)))
    got = _read(link, 2)
    assert got == [JOB, cancel] == [decode(unpack(frame, max_frames=32)), cancel]
    assert type(got[0]) is Request


def _refusal(frame: bytes) -> str:
    with pytest.raises(ProtocolError) as caught:
        decode([frame])
    return f"dropped a malformed message from the router: {caught.value}"


@pytest.mark.parametrize(
    "bad",
    [
        pack_request(b"j-bad", b"default", b"", b'["run", "\xff"]'),  # a packed REQUEST
        pack_request(b"j-bad", b"default", b"timeout,x", b"[]"),
        pack_request(b"", b"default", b"", b"[]"),
        pack_request(b"j-bad", b"default", b"", b"[]").replace(b",5,", b",05,", 1),
        b"0,8,x\n",  # not a packed REQUEST: unpack says why
    ],
)
def test_a_malformed_one_is_logged_and_dropped_as_before(
    router: FakeRouter,
    link: RouterLink[object],
    caplog: pytest.LogCaptureFixture,
    bad: bytes,
) -> None:
    caplog.set_level(logging.WARNING, logger="django_eventmq.jobmanager")
    _send(router, link, bad, pack(encode(JOB)))
    assert _read(link, 1) == [JOB]  # the next one still read
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [_refusal(bad)]


# -- the jobs of a bundle: each its plain frames -----------------------------------------


def test_the_jobs_of_a_bundle_are_the_requests_decode_gives(
    router: FakeRouter, link: RouterLink[object]
) -> None:
    cancel = Cancel(msgid="c-1", job_msgid="j-1")
    other = Request(msgid="j-2", queue="other", body_text="[]")
    frames = [encode(JOB), encode(cancel), encode(other)]
    _send(router, link, bundle(frames))
    got = _read(link, 3)
    assert got == [JOB, cancel, other] == [decode(f) for f in frames]
    assert type(got[0]) is Request and type(got[2]) is Request


@pytest.mark.parametrize(
    "bad",
    [
        request_frames(b"j-bad", b"default", b"", b'["run", "\xff"]'),
        request_frames(b"j-bad", b"default", b"timeout,x", b"[]"),
        request_frames(b"", b"default", b"", b"[]"),
        request_frames(b"j-bad", b"", b"", b"[]"),
        [b"", b"eMQP/1.0", b"REQUEST", b"j-bad", b"default", b""],  # a frame short
    ],
)
def test_a_malformed_job_in_a_bundle_is_logged_and_dropped_as_before(
    router: FakeRouter,
    link: RouterLink[object],
    caplog: pytest.LogCaptureFixture,
    bad: list[bytes],
) -> None:
    caplog.set_level(logging.WARNING, logger="django_eventmq.jobmanager")
    _send(router, link, bundle([bad, encode(JOB)]))
    assert _read(link, 1) == [JOB]  # the next one in the bundle still read
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    with pytest.raises(ProtocolError) as caught:
        decode(bad)
    assert warnings == [f"dropped a malformed message from the router: {caught.value}"]
