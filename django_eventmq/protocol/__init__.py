"""eMQP/1.0, sans-IO: messages, headers, job bodies and their wire form.

No sockets, no Django, no clock: callers pass frames in and get frames out.
"""

from __future__ import annotations

from django_eventmq.protocol.codec import decode, describe, encode, encode_to, split_identity
from django_eventmq.protocol.extensions import (
    Cancel,
    Done,
    Features,
    Nack,
    Partial,
    Queued,
    Reject,
    Running,
    Unready,
)
from django_eventmq.protocol.headers import EMPTY_HEADERS, Headers, parse_headers
from django_eventmq.protocol.heartbeat import Liveness
from django_eventmq.protocol.ids import new_msgid
from django_eventmq.protocol.limits import DEFAULT_LIMITS, Limits, OverLimit
from django_eventmq.protocol.messages import (
    Ack,
    AdminRequest,
    Disconnect,
    Heartbeat,
    Inform,
    Kbai,
    Message,
    Publish,
    QueueSpec,
    Ready,
    Reply,
    Request,
    Schedule,
    Unschedule,
    parse_queue_spec,
)
from django_eventmq.protocol.payload import JobBody, decode_json, encode_json, parse_job

__all__ = [
    "DEFAULT_LIMITS",
    "EMPTY_HEADERS",
    "Ack",
    "AdminRequest",
    "Cancel",
    "Disconnect",
    "Done",
    "Features",
    "Headers",
    "Heartbeat",
    "Inform",
    "JobBody",
    "Kbai",
    "Limits",
    "Liveness",
    "Message",
    "Nack",
    "OverLimit",
    "Partial",
    "Publish",
    "QueueSpec",
    "Queued",
    "Ready",
    "Reject",
    "Reply",
    "Request",
    "Running",
    "Schedule",
    "Unready",
    "Unschedule",
    "decode",
    "decode_json",
    "describe",
    "encode",
    "encode_json",
    "encode_to",
    "new_msgid",
    "parse_headers",
    "parse_job",
    "parse_queue_spec",
    "split_identity",
]
