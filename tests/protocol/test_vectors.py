"""Every frame captured from the reference decodes, and re-encodes to the same frames."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from django_eventmq.protocol import (
    Ack,
    Heartbeat,
    Inform,
    Kbai,
    Ready,
    Reply,
    Request,
    Schedule,
    Unschedule,
    decode,
    encode,
    parse_job,
)

VECTORS = Path(__file__).resolve().parents[3] / "shared" / "vectors" / "reference-frames.json"
LOCAL_COPY = Path(__file__).with_name("reference-frames.json")


def _load() -> dict[str, list[list[str]]]:
    path = VECTORS if VECTORS.exists() else LOCAL_COPY
    data = json.loads(path.read_text())
    data.pop("about")
    return data


CASES = [
    pytest.param(key, frames, id=f"{key}[{i}]")
    for key, messages in _load().items()
    for i, frames in enumerate(messages)
]

EXPECTED_TYPE = {
    "REQUEST": Request,
    "SCHEDULE": Schedule,
    "UNSCHEDULE": Unschedule,
    "INFORM": Inform,
    "ACK": Ack,
    "HEARTBEAT": Heartbeat,
    "KBYE": Kbai,
    "READY": Ready,
    "REPLY": Reply,
}


def _strip_identity(frames: list[str]) -> list[bytes]:
    raw = [f.encode() for f in frames]
    return raw[1:] if raw[0] != b"" else raw


@pytest.mark.parametrize(("key", "frames"), CASES)
def test_reference_frames_round_trip(key: str, frames: list[str]) -> None:
    raw = _strip_identity(frames)
    message = decode(raw)
    command = raw[2].decode()
    assert type(message) is EXPECTED_TYPE[command]
    assert message.msgid == raw[3].decode()
    assert encode(message) == raw


def test_reference_request_fields() -> None:
    frames = _load()["client_to_router.REQUEST"][1]
    message = decode(_strip_identity(frames))
    assert isinstance(message, Request)
    assert message.queue == "email"
    assert message.headers.reply_requested and message.headers.guarantee
    assert (message.headers.retry_count, message.headers.timeout) == (3, 30)
    job = parse_job(message.body_text)
    assert (job.path, job.callable, job.args, job.kwargs) == ("vjobs", "hello", (2,), {})


def test_reference_schedule_timing_forms() -> None:
    interval_form, cron_form = _load()["client_to_router.SCHEDULE"]
    first = decode(_strip_identity(interval_form))
    second = decode(_strip_identity(cron_form))
    assert isinstance(first, Schedule) and isinstance(second, Schedule)
    assert (first.interval, first.cron) == (60, None)
    assert first.headers.nohaste and first.headers.run_count == 5
    assert (second.interval, second.cron) == (None, "*/5 * * * *")


def test_reference_inform_empty_queue_means_default() -> None:
    message = decode(_strip_identity(_load()["jobmanager_to_router.INFORM"][0]))
    assert isinstance(message, Inform)
    assert message.queues == ()
    assert message.effective_queues() == ((10, "default"),)


def test_worker_reply_keeps_payload_then_msgid() -> None:
    message = decode(_strip_identity(_load()["jobmanager_to_router.on_sigterm.REPLY"][0]))
    assert isinstance(message, Reply)
    assert json.loads(message.payload) == {"value": {"echo": 7}}
    assert message.reply_to == "req-1"
