"""Round trips of every command and the malformed inputs the decoder must refuse."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_eventmq.errors import EventMQError, InvalidJob, ProtocolError
from django_eventmq.protocol import (
    Ack,
    AdminRequest,
    Cancel,
    Disconnect,
    Done,
    Features,
    Headers,
    Heartbeat,
    Inform,
    JobBody,
    Kbai,
    Nack,
    Partial,
    Publish,
    Ready,
    Reject,
    Reply,
    Request,
    Schedule,
    Unschedule,
    decode,
    encode,
    parse_headers,
    parse_job,
    parse_queue_spec,
    split_identity,
)
from django_eventmq.protocol.extensions import refusal_reason

MESSAGES = [
    Ack(msgid="m1", ack_msgid="m0"),
    Reply(msgid="m2", payload='{"value": 1}'),
    Reply(msgid="m3", payload='{"value": 1}', reply_to="m0"),
    Heartbeat(msgid="m4", timestamp=1795317913.5600617),
    Disconnect(msgid="m5"),
    Kbai(msgid="m6"),
    Kbai(msgid="m7", kbye=True),
    Ready(msgid="m8"),
    Request(msgid="m9", queue="email", headers=Headers(reply_requested=True), body_text="[]"),
    Publish(msgid="m10", topic="orders.new", body_text="{}"),
    Publish(msgid="m11", topic="orders.new", body_text="{}", headers=Headers(guarantee=True)),
    Schedule(msgid="m12", queue="default", body_text="x", interval=60),
    Schedule(msgid="m13", queue="default", body_text="x", cron="*/5 * * * *"),
    Schedule(msgid="m14", queue="default", body_text="x"),
    Unschedule(msgid="m15", queue="default", body_text="x"),
    Inform(msgid="m16", queues=((30, "email"), (10, "default")), peer_type="worker"),
    Inform(msgid="m17", peer_type="scheduler"),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: f"{m.command}-{m.msgid}")
def test_round_trip(message):
    frames = encode(message)
    assert frames[:2] == [b"", b"eMQP/1.0"]
    assert decode(frames) == message


def test_kbye_spelling_is_sent_when_asked():
    assert encode(Kbai(msgid="a", kbye=True))[2] == b"KBYE"
    assert encode(Kbai(msgid="a"))[2] == b"KBAI"


def test_admin_commands_only_decode_on_the_admin_socket():
    frames = [b"", b"eMQP/1.0", b"STATUS", b"id"]
    assert decode(frames, admin=True) == AdminRequest(msgid="id", action="STATUS")
    with pytest.raises(ProtocolError, match="unknown command"):
        decode(frames)


BAD_FRAMES = [
    ([], "too short"),
    ([b"", b"eMQP/1.0", b"READY"], "too short"),
    ([b"x", b"eMQP/1.0", b"READY", b"id"], "frame 0 must be empty"),
    ([b"", b"eMQP/0.9", b"READY", b"id"], "unsupported protocol version"),
    ([b"", b"eMQP/1.0", b"BOGUS", b"id"], "unknown command"),
    ([b"", b"eMQP/1.0", b"READY", b""], "msgid must be a non-empty"),
    ([b"", b"eMQP/1.0", b"READY", b"id", b"extra"], "expected 0 frame"),
    ([b"", b"eMQP/1.0", b"REQUEST", b"id", b"q", b""], "expected 3 frame"),
    ([b"", b"eMQP/1.0", b"REQUEST", b"id", b"", b"", b"[]"], "queue name is empty"),
    ([b"", b"eMQP/1.0", b"REQUEST", b"id", b"q", b"timeout:x", b"[]"], "timeout"),
    ([b"", b"eMQP/1.0", b"REQUEST", b"id", b"q", b"retry-count:-1", b"[]"], "retry-count"),
    ([b"", b"eMQP/1.0", b"REQUEST", b"\xff\xfe", b"q", b"", b"[]"], "not valid UTF-8"),
    ([b"", b"eMQP/1.0", b"HEARTBEAT", b"id", b"soon"], "not a number"),
    ([b"", b"eMQP/1.0", b"HEARTBEAT", b"id", b"nan"], "finite"),
    ([b"", b"eMQP/1.0", b"INFORM", b"id", b"", b"robot"], "peer type"),
    ([b"", b"eMQP/1.0", b"INFORM", b"id", b"[[1,", b"worker"], "queue list"),
    ([b"", b"eMQP/1.0", b"INFORM", b"id", b'[["a","b"]]', b"worker"], "queue entry"),
    ([b"", b"eMQP/1.0", b"SCHEDULE", b"id", b"q", b"", b"x", b"y"], "expected 3 body frames"),
    ([b"", b"eMQP/1.0", b"SCHEDULE", b"id", b"q", b"", b"soon", b"x", b""], "interval"),
    ([b"", b"eMQP/1.0", b"ACK", b"id", b""], "acknowledged msgid is empty"),
]


@pytest.mark.parametrize(("frames", "reason"), BAD_FRAMES, ids=[r for _, r in BAD_FRAMES])
def test_malformed_frames_raise_one_typed_error(frames, reason):
    with pytest.raises(ProtocolError, match=reason) as info:
        decode(frames)
    assert isinstance(info.value, EventMQError)
    assert info.value.frames == tuple(frames)


def test_split_identity_needs_two_frames():
    assert split_identity([b"peer", b""]) == (b"peer", [b""])
    with pytest.raises(ProtocolError):
        split_identity([b"peer"])


HEADER_CASES = [
    ("", Headers()),
    ("reply-requested", Headers(reply_requested=True)),
    (
        "reply-requested,guarantee,retry-count:3,timeout:30",
        Headers(reply_requested=True, guarantee=True, retry_count=3, timeout=30),
    ),
    ("nohaste,run_count:5", Headers(nohaste=True, run_count=5)),
    ("guarantee,,", Headers(guarantee=True)),
    ("x-trace:abc", Headers(extra=("x-trace:abc",))),
]


@pytest.mark.parametrize(("text", "headers"), HEADER_CASES)
def test_header_table(text, headers):
    assert parse_headers(text) == headers
    assert parse_headers(headers.encode()) == headers


@pytest.mark.parametrize("text", ["timeout", "guarantee:1", "run_count:-2", "retry-count:1.5"])
def test_bad_headers(text):
    with pytest.raises(ProtocolError):
        parse_headers(text)


QUEUE_SPECS = [
    ("", ()),
    ('[[10, "default"], [30, "email"]]', ((10, "default"), (30, "email"))),
    ("[40, 'email'],[10, 'default']", ((40, "email"), (10, "default"))),
    ("[40, 'email']", ((40, "email"),)),
    ('["email", "default"]', ((10, "email"), (10, "default"))),
    ("email,default", ((10, "email"), (10, "default"))),
]


@pytest.mark.parametrize(("text", "queues"), QUEUE_SPECS)
def test_queue_spec_forms(text, queues):
    assert parse_queue_spec(text) == queues


def test_job_body_round_trip_and_method_form():
    body = JobBody(path="pkg.mod:Mailer", callable="send", args=(1,), class_kwargs={"a": 2})
    parsed = parse_job(body.encode())
    assert parsed == body
    assert (parsed.module, parsed.class_name, parsed.name) == (
        "pkg.mod",
        "Mailer",
        "pkg.mod:Mailer.send",
    )


BAD_JOBS = [
    ("not json", "not valid JSON"),
    ("{}", "JSON array"),
    ('["eval", {}]', "verb"),
    ('["run", []]', "object"),
    ('["run", {"path": "m"}]', "needs both"),
    ('["run", {"path": "m", "callable": "f", "args": {}}]', "args must be an array"),
    ('["run", {"path": "m", "callable": "f", "kwargs": []}]', "kwargs must be an object"),
    ('["run", {"path": "os;rm", "callable": "f"}]', "dotted module path"),
    ('["run", {"path": "m", "callable": "__import__(1)"}]', "identifier"),
    ('["run", {"path": "m:", "callable": "f"}]', "class part"),
    ('["run", {"path": "m", "callable": "f", "args": [NaN]}]', "not valid JSON"),
    ("[" * 100 + "]" * 100, "nested deeper"),
]


@pytest.mark.parametrize(("text", "reason"), BAD_JOBS, ids=[r for _, r in BAD_JOBS])
def test_bad_job_bodies(text, reason):
    with pytest.raises(InvalidJob, match=reason):
        parse_job(text)


def test_unserialisable_arguments_are_a_type_error():
    with pytest.raises(TypeError, match="not JSON-serialisable"):
        JobBody(path="m", callable="f", args=(object(),)).encode()


# -- property-based --------------------------------------------------------

texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30)


@given(
    msgid=texts,
    queue=texts,
    body=st.text(max_size=200),
    reply=st.booleans(),
    retries=st.integers(0, 10**6),
    timeout=st.integers(0, 10**6),
)
def test_request_round_trip_property(msgid, queue, body, reply, retries, timeout):
    headers = Headers(reply_requested=reply, retry_count=retries, timeout=timeout)
    message = Request(msgid=msgid, queue=queue, headers=headers, body_text=body)
    assert decode(encode(message)) == message


@given(st.lists(st.binary(max_size=40), max_size=9))
def test_decoder_never_raises_anything_but_protocol_error(frames):
    try:
        decode(frames, admin=True)
    except ProtocolError as exc:
        assert exc.frames == tuple(frames)


@given(st.lists(st.binary(max_size=20), min_size=0, max_size=6))
def test_decoder_on_well_framed_garbage(body):
    for command in (b"REQUEST", b"INFORM", b"SCHEDULE", b"HEARTBEAT", b"REPLY", b"PUBLISH"):
        # Anything but ProtocolError escaping would fail the test.
        with contextlib.suppress(ProtocolError):
            decode([b"", b"eMQP/1.0", command, b"id", *body])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(
    args=st.lists(json_values, max_size=4),
    kwargs=st.dictionaries(st.text(max_size=8), json_values, max_size=4),
)
def test_job_body_property(args, kwargs):
    body = JobBody(path="app.jobs", callable="run", args=tuple(args), kwargs=kwargs)
    assert parse_job(body.encode()) == body
    assert json.loads(body.encode())[0] == "run"


# -- our extensions ----------------------------------------------------------

EXTENSIONS = [
    Features(msgid="f1", features={"done": 1, "cancel": 1}),
    Done(msgid="d1", job_msgid="m1", status="ok", payload='{"value": 3}'),
    Done(msgid="d2", job_msgid="m1", status="timeout"),
    Nack(msgid="n1", job_msgid="m1", reason="stopping"),
    Cancel(msgid="c1", job_msgid="m1"),
    Reject(msgid="r1", job_msgid="m1", reason="job not registered"),
    Partial(msgid="p1", job_msgid="m1", payload='{"value": 0.5}'),
    Partial(msgid="p2", job_msgid="m1", payload='{"value": {"done": 3, "of": 10}}'),
    Partial(msgid="p3", job_msgid="m1", payload='{"value": null}'),
]


@pytest.mark.parametrize("message", EXTENSIONS, ids=lambda m: f"{m.command}-{m.msgid}")
def test_extension_round_trip(message):
    assert decode(encode(message)) == message


def test_partial_frames_and_value():
    message = Partial(msgid="p1", job_msgid="m1", payload='{"value": [1, "two"]}')
    assert encode(message) == [
        b"",
        b"eMQP/1.0",
        b"PARTIAL",
        b"p1",
        b"m1",
        b'{"value": [1, "two"]}',
    ]
    assert decode(encode(message)).value == [1, "two"]


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"job_msgid": "", "payload": '{"value": 1}'}, "job msgid is empty"),
        ({"job_msgid": "m1", "payload": "nope"}, "not JSON"),
        ({"job_msgid": "m1", "payload": "[1]"}, '"value" key'),
        ({"job_msgid": "m1", "payload": '{"progress": 1}'}, '"value" key'),
        ({"job_msgid": "m1", "payload": '{"value": "' + "x" * 1024 * 1024 + '"}'}, "at most"),
    ],
    ids=["empty-msgid", "not-json", "not-object", "no-value", "too-big"],
)
def test_bad_partial_fields(fields, reason):
    with pytest.raises(ProtocolError, match=reason):
        Partial(msgid="p1", **fields)


@pytest.mark.parametrize(
    ("frames", "reason"),
    [
        ([b"", b"eMQP/1.0", b"DONE", b"id", b"m1", b"great", b""], "status must be one of"),
        ([b"", b"eMQP/1.0", b"DONE", b"id", b"", b"ok", b""], "job msgid is empty"),
        ([b"", b"eMQP/1.0", b"FEATURES", b"id", b"[1]"], "JSON object"),
        ([b"", b"eMQP/1.0", b"FEATURES", b"id", b"{"], "not JSON"),
        ([b"", b"eMQP/1.0", b"CANCEL", b"id"], "expected 1 frame"),
        ([b"", b"eMQP/1.0", b"PARTIAL", b"id", b"m1"], "expected 2 frame"),
        ([b"", b"eMQP/1.0", b"PARTIAL", b"id", b"m1", b"{}", b"x"], "expected 2 frame"),
        ([b"", b"eMQP/1.0", b"PARTIAL", b"id", b"", b'{"value": 1}'], "job msgid is empty"),
        ([b"", b"eMQP/1.0", b"PARTIAL", b"id", b"m1", b"{"], "not JSON"),
        ([b"", b"eMQP/1.0", b"PARTIAL", b"id", b"m1", b'"text"'], '"value" key'),
        ([b"", b"eMQP/1.0", b"PARTIAL", b"id", b"m1", b'{"value": "\xff"}'], "UTF-8"),
    ],
)
def test_bad_extension_frames(frames, reason):
    with pytest.raises(ProtocolError, match=reason):
        decode(frames)


def test_priority_and_delay_headers():
    headers = parse_headers("guarantee,priority:-5,delay-until:1795317913.5")
    assert (headers.guarantee, headers.priority, headers.delay_until) == (True, -5, 1795317913.5)
    assert parse_headers(headers.encode()) == headers
    for bad in ("priority:high", "delay-until:soon", "delay-until:inf"):
        with pytest.raises(ProtocolError):
            parse_headers(bad)


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (
            '{"value": "m", "error": {"type": "JobNotAllowed", "message": "not registered"}}',
            "not registered",
        ),
        ('{"value": "m", "error": {"type": "X", "message": ""}}', "refused by the job manager"),
        ('{"value": 1}', "refused by the job manager"),
        ("not json", "not json"),
        ("[1, 2]", "[1, 2]"),
        ('{"error": "plain"}', '{"error": "plain"}'),
        ("", "refused by the job manager"),
        ('{"error": {"message": "' + "y" * 5000 + '"}}', "y" * 1000),
    ],
    ids=["message", "empty-message", "no-error", "not-json", "list", "error-text", "empty", "long"],
)
def test_refusal_reason_from_a_done_payload(payload, reason):
    assert refusal_reason(payload) == reason
