"""Bounds on frames, sizes, nesting and header values: refused with a clear reason,
and the receiving socket keeps serving."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from django_eventmq.errors import ConfigurationError, InvalidJob, JobNotAllowed, ProtocolError
from django_eventmq.protocol import (
    DEFAULT_LIMITS,
    Headers,
    JobBody,
    Limits,
    OverLimit,
    Publish,
    Request,
    Schedule,
    decode_json,
    parse_job,
)
from django_eventmq.runtime import registry, transport
from django_eventmq.runtime.settings import Settings, from_mapping
from django_eventmq.runtime.transport import Channel

V = b"eMQP/1.0"
JOB = JobBody(path="tests.jobs_registry.registered", callable="greet", args=("x",)).encode()


def _request(headers: str = "", body: str = JOB, msgid: str = "m1") -> Request:
    from django_eventmq.protocol import parse_headers

    return Request(msgid=msgid, queue="default", headers=parse_headers(headers), body_text=body)


# -- the policy itself -------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ("retry-count:101", "retry-count is above 100"),
        ("timeout:604801", "timeout is above 604800 seconds"),
        ("priority:1000001", "priority is outside"),
        ("priority:-1000001", "priority is outside"),
    ],
)
def test_header_values_out_of_bounds(headers: str, reason: str) -> None:
    with pytest.raises(OverLimit, match=reason) as info:
        DEFAULT_LIMITS.check_message(_request(headers, msgid="job-7"))
    assert (info.value.msgid, info.value.command) == ("job-7", "REQUEST")


@pytest.mark.parametrize("headers", ["", "retry-count:100", "timeout:604800,guarantee"])
def test_header_values_at_the_bounds_pass(headers: str) -> None:
    DEFAULT_LIMITS.check_message(_request(headers))


def test_body_size_applies_to_every_client_command() -> None:
    limits = Limits(max_body_bytes=100)
    big = "x" * 101
    for message in (
        _request(body=big),
        Schedule(msgid="s", queue="q", body_text=big, interval=5),
        Publish(msgid="p", topic="t", body_text=big),
    ):
        with pytest.raises(OverLimit, match="larger than 100 bytes"):
            limits.check_message(message)
    limits.check_message(_request(body="x" * 100))


def test_frame_count_and_total_size() -> None:
    limits = Limits(max_frames=8, max_message_bytes=100)
    with pytest.raises(OverLimit, match="more than 8 frames"):
        limits.check_frames([b""] * 9)
    with pytest.raises(OverLimit, match="larger than 100 bytes"):
        limits.check_frames([b"x" * 60, b"y" * 41])
    limits.check_frames([b"x" * 50, b"y" * 50])


def test_limits_validate_themselves() -> None:
    with pytest.raises(ValueError, match="max_frames"):
        Limits(max_frames=3)
    with pytest.raises(ValueError, match="max_body_bytes"):
        Limits(max_body_bytes=0)


def test_json_size_and_depth_are_parameters() -> None:
    deep = "[" * 10 + "]" * 10
    assert decode_json(deep, max_depth=10) == [[[[[[[[[[]]]]]]]]]]
    with pytest.raises(InvalidJob, match="nested deeper than 9 levels"):
        decode_json(deep, max_depth=9)
    with pytest.raises(InvalidJob, match="larger than 10 bytes"):
        decode_json(json.dumps("a" * 20), max_bytes=10)
    with pytest.raises(InvalidJob, match="larger than"):
        parse_job(JOB, max_bytes=len(JOB) - 1)
    assert parse_job(JOB, max_bytes=len(JOB)).callable == "greet"
    # Far deeper than the recursion limit: refused, not crashed.
    with pytest.raises(InvalidJob):
        decode_json("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InvalidJob):
        decode_json("1" * 10_000)  # int() refuses giant literals (CPython's digit limit)


# -- on a live socket -------------------------------------------------------------------


@pytest.fixture
def pair() -> Iterator[tuple[Channel, Channel]]:
    server = Channel(transport.ROUTER, bind="tcp://127.0.0.1:*")
    peer = Channel(transport.DEALER, connect=server.address, identity=b"peer")
    yield server, peer
    peer.close()
    server.close()


def _good(peer: Channel, server: Channel, msgid: str) -> None:
    peer.send(_request(msgid=msgid))
    assert server.poll(5000)
    identity, _frames, message = server.recv()
    assert (identity, message.msgid) == (peer.identity, msgid)


def test_router_channel_refuses_out_of_bound_headers_and_keeps_serving(
    pair: tuple[Channel, Channel],
) -> None:
    server, peer = pair
    peer.send(_request("retry-count:1000000", msgid="bad"))
    assert server.poll(5000)
    with pytest.raises(OverLimit, match="retry-count") as info:
        server.recv()
    assert (info.value.identity, info.value.msgid) == (b"peer", "bad")
    _good(peer, server, "after")


def test_over_long_message_is_cut_drained_and_refused(pair: tuple[Channel, Channel]) -> None:
    server, peer = pair
    peer.send_frames([b"", V, b"REQUEST", b"long", *([b"q"] * 10_000)])
    assert server.poll(5000)
    raw = server.recv_frames()  # never raises: routers that decode themselves stay up
    assert len(raw) == server.max_frames + 2
    peer.send_frames([b"", V, b"REQUEST", b"long", *([b"q"] * 100)])
    assert server.poll(5000)
    with pytest.raises(ProtocolError, match="more than 32 frames") as info:
        server.recv()
    assert info.value.identity == b"peer"
    _good(peer, server, "after")  # the rest of the long messages was consumed


def test_dealer_channels_cap_frames_too() -> None:
    server = Channel(transport.ROUTER, bind="tcp://127.0.0.1:*")
    peer = Channel(transport.DEALER, connect=server.address, identity=b"p")
    try:
        peer.send_frames([b"", V, b"HEARTBEAT", b"m", b"1.0"])
        assert server.poll(5000)
        server.recv()
        server.send_frames([b"p", *([b"x"] * 40)])
        assert peer.poll(5000)
        with pytest.raises(ProtocolError, match="more than 32 frames"):
            peer.recv()
        assert peer.limits is None and peer.max_frames == 32
    finally:
        peer.close()
        server.close()


def test_frame_over_maxmsgsize_costs_the_sender_its_connection_only() -> None:
    server = Channel(
        transport.ROUTER, bind="tcp://127.0.0.1:*", options={transport.MAXMSGSIZE: 1024}
    )
    big = Channel(transport.DEALER, connect=server.address, identity=b"big")
    small = Channel(transport.DEALER, connect=server.address, identity=b"small")
    try:
        big.send_frames([b"", V, b"REQUEST", b"m", b"q", b"", b"x" * 2048])
        assert not server.poll(1000)
        _good(small, server, "still-serving")
    finally:
        for channel in (big, small, server):
            channel.close()


# -- settings -----------------------------------------------------------------------------


def test_limit_settings_are_validated() -> None:
    with pytest.raises(ConfigurationError, match="MAX_FRAMES"):
        Settings(max_frames=4)
    with pytest.raises(ConfigurationError, match="must not exceed MAX_MESSAGE_BYTES"):
        Settings(max_body_bytes=10, max_message_bytes=5)
    with pytest.raises(ConfigurationError, match="MAX_TIMEOUT"):
        from_mapping({"MAX_TIMEOUT": 0}, environ={})
    s = from_mapping(environ={"EMQ_MAX_FRAMES": "16", "EMQ_MAX_RETRY_COUNT": "5"})
    assert (s.max_frames, s.max_retry_count) == (16, 5)


def test_queue_allowed_jobs_setting() -> None:
    s = from_mapping(
        environ={"EMQ_QUEUE_ALLOWED_JOBS": '{"email": ["app.mail.send", "app.mail.*"]}'}
    )
    assert s.queue_allowed_jobs == (("email", ("app.mail.send", "app.mail.*")),)
    assert from_mapping({"QUEUE_ALLOWED_JOBS": {"*": []}}, environ={}).queue_allowed_jobs == (
        ("*", ()),
    )
    with pytest.raises(ConfigurationError, match="expected JSON"):
        from_mapping(environ={"EMQ_QUEUE_ALLOWED_JOBS": "email=app.x"})
    with pytest.raises(ConfigurationError, match="not a queue name"):
        from_mapping({"QUEUE_ALLOWED_JOBS": {"bad queue": ["a"]}}, environ={})
    with pytest.raises(ConfigurationError, match="list of job names"):
        from_mapping({"QUEUE_ALLOWED_JOBS": {"email": "app.x"}}, environ={})


# -- per-queue allowlist --------------------------------------------------------------------


GREET = JobBody(path="tests.jobs_registry.registered", callable="greet", args=("x",))


def test_per_queue_allowlist_on_top_of_registration() -> None:
    import tests.jobs_registry.registered  # noqa: F401 - registers greet

    table = {"email": ["tests.jobs_registry.registered.greet"], "reports": ["app.reports.*"]}
    assert registry.resolve(GREET, (), "email", table)("a") == "hello a"
    assert registry.resolve(GREET, (), "unlisted-queue", table)("a") == "hello a"
    with pytest.raises(JobNotAllowed, match="not allowed on queue 'reports'"):
        registry.resolve(GREET, (), "reports", table)
    # "*" covers queues not named; an empty list closes them.
    with pytest.raises(JobNotAllowed, match="QUEUE_ALLOWED_JOBS"):
        registry.resolve(GREET, (), "other", {"*": []})
    # The old two-argument form still works, and pairs (the settings' form) work too.
    assert registry.resolve(GREET, ())("b") == "hello b"
    pairs = (("email", ("tests.jobs_registry.*",)),)
    assert registry.resolve(GREET, queue="email", queue_allowed=pairs)("c") == "hello c"


def test_per_queue_allowlist_never_admits_an_unregistered_job() -> None:
    plain = JobBody(path="tests.jobs_registry.registered", callable="not_a_job")
    with pytest.raises(JobNotAllowed, match="not registered"):
        registry.resolve(plain, (), "email", {"email": ["tests.jobs_registry.registered.*"]})


@pytest.mark.parametrize(
    ("name", "allowed"),
    [
        ("app.mail.send", True),
        ("app.mail:Mailer.send", True),
        ("app.mailer.send", False),
        ("app.send", False),
    ],
)
def test_allowlist_module_patterns(name: str, allowed: bool) -> None:
    assert registry.allowed_on_queue(name, "q", {"q": ["app.mail.*"]}) is allowed


def test_headers_class_still_accepts_large_values_for_wire_compatibility() -> None:
    # Decoding stays lenient (the reference sends what it likes); bounds are policy.
    assert Headers(retry_count=10**6).retry_count == 10**6


def test_fast_path_request_check_matches_the_message_check() -> None:
    from django_eventmq.runtime.security import limits_from_settings

    limits = limits_from_settings(Settings(max_body_bytes=100, max_retry_count=3))
    limits.check_request_frames(b"m", b"retry-count:3,guarantee", b"x" * 100)
    with pytest.raises(OverLimit, match="retry-count is above 3") as info:
        limits.check_request_frames(b"m9", b"retry-count:4", b"{}")
    assert info.value.msgid == "m9"
    with pytest.raises(OverLimit, match="larger than 100 bytes"):
        limits.check_request_frames(b"m", b"", b"x" * 101)
    # Malformed headers are the decoder's business, not a limit.
    limits.check_request_frames(b"m", b"timeout:x", b"{}")
    limits.check_request_frames(b"m", b"\xff", b"{}")
