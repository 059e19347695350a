"""Expiry on the client: ``@job(expires=)`` and ``send(expires=)`` become the
``expires`` header (a unix time counted from sending); an expired outcome raises
:class:`JobExpired`."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from django_eventmq.client.expiry import expiry_time
from django_eventmq.client.handles import outcome_status, outcome_value
from django_eventmq.client.inbox import Outcome
from django_eventmq.client.jobs import job
from django_eventmq.errors import ConfigurationError, JobError, JobExpired
from django_eventmq.protocol import Headers, Reply
from django_eventmq.protocol.status import JobStatus
from tests.django.results.conftest import broker as broker  # a fixture
from tests.support import receive_request

NOW = 1_800_000_000.0
AT = datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC)


@job(expires=300, timeout=20)
def short_lived(a: int) -> int:
    return a


@job
def plain(a: int) -> int:
    return a


@pytest.mark.parametrize(
    ("expires", "expected"),
    [
        (None, None),
        (30, NOW + 30),
        (0.5, NOW + 0.5),
        (timedelta(minutes=5), NOW + 300),
        (
            datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC),
            datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp(),
        ),
    ],
)
def test_expiry_time_of_each_form(expires: object, expected: float | None) -> None:
    assert expiry_time(expires, NOW) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("expires", "message"),
    [
        (0, "> 0"),
        (-5, "> 0"),
        (math.inf, "finite"),
        (math.nan, "finite"),
        (True, "seconds"),
        ("300", "seconds"),
        (datetime(2031, 1, 1), "aware"),
    ],
)
def test_expiry_time_refuses(expires: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        expiry_time(expires, NOW)  # type: ignore[arg-type]


def test_a_bad_decorator_expiry_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="expires="):
        job(expires=-1)(_undecorated)
    with pytest.raises(ConfigurationError, match="seconds after each send"):
        job(expires=AT)(_undecorated)  # type: ignore[call-overload]


def _undecorated() -> None: ...


def test_the_decorator_expiry_counts_from_each_send() -> None:
    assert short_lived.expires_after == 300
    assert short_lived.headers.expires is None  # not a time until it is sent
    headers = short_lived.headers_for(now=NOW)
    assert (headers.expires, headers.timeout) == (NOW + 300, 20)
    assert short_lived.headers_for(expires=10, now=NOW).expires == NOW + 10
    assert short_lived.headers_for(Headers(expires=NOW + 1), now=NOW).expires == NOW + 1
    assert plain.headers_for(now=NOW).expires is None


def test_delay_and_send_put_the_expiry_on_the_request(broker) -> None:  # type: ignore[no-untyped-def]
    before = time.time()
    short_lived.delay(1)
    after = time.time()
    _identity, request = receive_request(broker)
    assert before + 300 <= request.headers.expires <= after + 300
    at = datetime.now(timezone(timedelta(hours=2))) + timedelta(minutes=1)
    plain.send((2,), expires=at)
    _identity, request = receive_request(broker)
    assert request.headers.expires == at.timestamp()
    plain.delay(3)
    _identity, request = receive_request(broker)
    assert request.headers.expires is None


def test_an_expired_outcome_raises_job_expired_a_job_error() -> None:
    payload = (
        '{"value": null, "error": {"type": "Expired", "message": "too late", "traceback": ""}}'
    )
    outcome: Outcome = Reply(msgid="r1", payload=payload, reply_to="j1")
    assert outcome_status(outcome) == JobStatus.EXPIRED
    with pytest.raises(JobExpired, match="too late") as caught:
        outcome_value(outcome)
    assert isinstance(caught.value, JobError)
