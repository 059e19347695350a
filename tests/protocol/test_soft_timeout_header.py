"""The ``soft-timeout`` header: on the wire beside ``timeout``, checked both ways."""

from __future__ import annotations

import pytest

from django_eventmq.errors import EventMQError, ProtocolError
from django_eventmq.protocol.headers import Headers, parse_headers


@pytest.mark.parametrize(
    ("text", "headers"),
    [
        ("soft-timeout:5", Headers(soft_timeout=5)),
        ("timeout:10,soft-timeout:9", Headers(timeout=10, soft_timeout=9)),
        (
            "guarantee,retry-count:2,timeout:30,soft-timeout:20,x-trace:abc",
            Headers(
                guarantee=True, retry_count=2, timeout=30, soft_timeout=20, extra=("x-trace:abc",)
            ),
        ),
    ],
)
def test_round_trip(text, headers):
    assert parse_headers(text) == headers
    assert parse_headers(headers.encode()) == headers
    assert "soft-timeout:" in headers.encode()


def test_absent_is_none_and_not_written():
    assert parse_headers("timeout:10").soft_timeout is None
    assert "soft" not in Headers(timeout=10).encode()


def test_soft_timeout_without_hard_timeout_is_allowed():
    assert Headers(soft_timeout=3).timeout == 0


@pytest.mark.parametrize("value", [0, -1, 1.5, "3", True])
def test_constructor_refuses_a_value_that_is_not_positive_whole(value):
    with pytest.raises(
        ProtocolError, match=r"soft_timeout: expected a whole number of seconds > 0"
    ):
        Headers(soft_timeout=value)


@pytest.mark.parametrize(("soft", "hard"), [(10, 10), (11, 10), (60, 1)])
def test_constructor_refuses_soft_not_below_hard(soft, hard):
    with pytest.raises(ProtocolError, match=r"must be less than timeout") as info:
        Headers(timeout=hard, soft_timeout=soft)
    # the message names both values and how to fix it
    assert f"{soft} must be less than timeout ({hard})" in str(info.value)
    assert "lower soft_timeout or raise timeout" in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, EventMQError)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("soft-timeout", "malformed"),
        ("soft-timeout:", "expected a whole number of seconds"),
        ("soft-timeout:soon", "expected a whole number of seconds"),
        ("soft-timeout:1.5", "expected a whole number of seconds"),
        ("soft-timeout:0", "> 0"),
        ("soft-timeout:-4", "> 0"),
        ("timeout:5,soft-timeout:5", "must be less than timeout"),
        ("soft-timeout:8,timeout:5", "must be less than timeout"),
    ],
)
def test_parse_refuses(text, reason):
    with pytest.raises(ProtocolError, match=reason):
        parse_headers(text)


def test_with_checks_again():
    headers = Headers(timeout=10, soft_timeout=5)
    assert headers.with_(timeout=0).soft_timeout == 5
    with pytest.raises(ProtocolError, match="must be less than timeout"):
        headers.with_(timeout=4)
