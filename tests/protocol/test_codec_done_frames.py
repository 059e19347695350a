"""views.done_frames: a DONE's frames built straight from its fields (the job
manager's per-job path) are the frames :func:`.codec.encode` makes of the Done."""

from __future__ import annotations

import pytest

from django_eventmq.protocol import Done, decode, encode
from django_eventmq.protocol.status import DONE_STATUSES
from django_eventmq.protocol.views import done_frames

_ODD = [
    ("m-1", "j-1", "ok", "null"),
    ("m-2", "j-2", "failed", ""),  # an empty payload
    ("ü" * 300, "é-\u2603-\U0001f600", "retry", '{"attempt": 2, "delay": 1.5}'),
    ("m,3\n", "j\x00,4\n", "refused", "a,b\nc\x00" * 50),  # separators and NULs
    ("m-5", "j-5", "died", "x" * 100_000),
]


@pytest.mark.parametrize(("msgid", "job_msgid", "status", "payload"), _ODD)
def test_same_frames_as_encode(msgid: str, job_msgid: str, status: str, payload: str) -> None:
    done = Done(msgid=msgid, job_msgid=job_msgid, status=status, payload=payload)
    frames = done_frames(msgid.encode(), job_msgid.encode(), status.encode(), payload.encode())
    assert frames == encode(done)
    assert decode(frames) == done


@pytest.mark.parametrize("status", sorted(DONE_STATUSES))
def test_every_status_as_encode_writes_it(status: str) -> None:
    # JobStatus members (a StrEnum) encode to their words, as Done.body() gives them.
    frames = done_frames(b"m", b"j", status.encode(), b"null")
    assert frames == encode(Done(msgid="m", job_msgid="j", status=status, payload="null"))
    assert frames[5] == str(status.value).encode()
