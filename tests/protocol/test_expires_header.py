"""The ``expires`` header: parsed, written back, refused when it is not a unix time."""

from __future__ import annotations

import math

import pytest

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol.headers import Headers, expires_of, parse_headers
from django_eventmq.protocol.status import expired_reply


def test_expires_round_trips_and_is_left_out_when_absent() -> None:
    headers = Headers(expires=1_800_000_000.25)
    assert headers.encode() == "expires:1800000000.25"
    assert parse_headers(headers.encode()).expires == 1_800_000_000.25
    assert parse_headers("timeout:5").expires is None
    assert "expires" not in Headers().encode()


@pytest.mark.parametrize("value", [0, -1.0, math.nan, math.inf, True, "1800000000"])
def test_a_bad_expires_field_is_refused(value: object) -> None:
    with pytest.raises(ProtocolError, match="expires"):
        Headers(expires=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text", ["expires:soon", "expires:nan", "expires:inf", "expires:0", "expires:-5", "expires"]
)
def test_a_bad_expires_header_is_refused(text: str) -> None:
    with pytest.raises(ProtocolError, match="expires"):
        parse_headers(text)


def test_expires_of_reads_a_raw_frame() -> None:
    assert expires_of(b"guarantee,expires:12.5,timeout:3") == 12.5
    assert expires_of(b"guarantee,timeout:3") is None
    assert expires_of(b"expires:bad") is None  # unreadable: never expires here


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ('{"value": null, "error": {"type": "Expired", "message": "m"}}', True),
        ('{"value": "Cancelled", "error": {"type": "Cancelled", "message": "Expired"}}', False),
        ('{"value": "Expired"}', False),
        ("Expired, not JSON", False),
        ('["Expired"]', False),
    ],
)
def test_expired_reply_reads_only_an_expired_error(payload: str, expected: bool) -> None:
    assert expired_reply(payload) is expected
