"""Delays (``delay_in``, ``countdown=``, ``eta=``) and the decorator's options kept by ``send``.

Pure checks of the headers each form produces (``Job.headers_for`` with a
fixed ``now``), then what a client puts on the wire, read by a raw ROUTER on
a loopback port playing the router.
"""

from __future__ import annotations

import math
import threading
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from django_eventmq.client.jobs import due_time, job, merged_headers
from django_eventmq.client.pool import close_clients
from django_eventmq.errors import ConfigurationError, EventMQError
from django_eventmq.protocol import Ack, Headers, new_msgid, parse_job
from tests.django.results.conftest import broker as broker  # a fixture
from tests.support import receive_request

NOW = 1_800_000_000.0


@job
def plain(a: int, b: int = 0) -> int:
    return a + b


@job(
    queue="mail",
    reply_requested=True,
    retry_count=3,
    timeout=40,
    soft_timeout=30,
    priority=-2,
)
def configured(a: int) -> int:
    return a


@job(guarantee=True, timeout=9)
def guaranteed(a: int) -> int:
    return a


# -- due_time: the delay-until each form gives ------------------------------------


@pytest.mark.parametrize(
    ("countdown", "eta", "expected"),
    [
        (None, None, None),
        (30, None, NOW + 30),
        (2.5, None, NOW + 2.5),
        (timedelta(minutes=2), None, NOW + 120),
        (0, None, None),  # no delay: no header
        (None, datetime.fromtimestamp(NOW + 60, UTC), NOW + 60),
        (None, datetime.fromtimestamp(NOW + 60, timezone(timedelta(hours=5))), NOW + 60),
        # Already past: kept, and the router hands the job out at once.
        (None, datetime.fromtimestamp(NOW - 60, UTC), NOW - 60),
    ],
)
def test_due_time_of_each_form(countdown, eta, expected):
    assert due_time(countdown, eta, NOW) == expected


@pytest.mark.parametrize(
    ("countdown", "eta", "message"),
    [
        (None, datetime(2030, 1, 1), "aware datetime"),  # naive
        (None, "2030-01-01T00:00:00Z", "aware datetime"),
        (None, NOW + 60, "aware datetime"),  # a unix time is not an eta
        (-1, None, ">= 0 seconds"),
        (timedelta(seconds=-5), None, ">= 0 seconds"),
        (math.nan, None, "takes seconds"),
        (math.inf, None, "takes seconds"),
        (True, None, "takes seconds"),
        ("30", None, "takes seconds"),
        (30, datetime.fromtimestamp(NOW, UTC), "not both"),
    ],
)
def test_due_time_refuses(countdown, eta, message):
    with pytest.raises(ConfigurationError, match=message) as raised:
        due_time(countdown, eta, NOW)
    assert isinstance(raised.value, ValueError)
    assert isinstance(raised.value, EventMQError)


def test_naive_eta_error_says_to_pass_an_aware_datetime():
    with pytest.raises(ConfigurationError) as raised:
        plain.headers_for(eta=datetime(2030, 1, 1, 9, 0))
    assert "must be an aware datetime" in str(raised.value)
    assert "timezone.now()" in str(raised.value)


# -- headers_for: the decorator's options kept -------------------------------------

OPTIONS = {
    "reply_requested": True,
    "retry_count": 3,
    "timeout": 40,
    "soft_timeout": 30,
    "priority": -2,
}


def test_decorator_options_are_the_job_headers():
    for name, value in OPTIONS.items():
        assert getattr(configured.headers, name) == value, name


@pytest.mark.parametrize("name", sorted(OPTIONS))
@pytest.mark.parametrize(
    "explicit",
    [Headers(), Headers(nohaste=True), Headers(extra=("trace:abc",)), Headers(delay_until=NOW)],
    ids=["empty", "other-flag", "extra", "delay"],
)
def test_each_decorator_option_survives_explicit_headers(name, explicit):
    assert getattr(configured.headers_for(explicit), name) == OPTIONS[name]


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_each_decorator_option_survives_a_delay(name):
    headers = configured.headers_for(countdown=30, now=NOW)
    assert getattr(headers, name) == OPTIONS[name]
    assert headers.delay_until == NOW + 30


def test_guarantee_survives_explicit_headers():
    assert guaranteed.headers_for(Headers(priority=4)).guarantee
    assert guaranteed.headers_for(Headers(priority=4)).timeout == 9


@pytest.mark.parametrize(
    ("explicit", "name", "value"),
    [
        (Headers(retry_count=1), "retry_count", 1),
        (Headers(timeout=60), "timeout", 60),
        (Headers(timeout=60, soft_timeout=50), "soft_timeout", 50),
        (Headers(priority=9), "priority", 9),
        (Headers(guarantee=True), "guarantee", True),
        (Headers(run_count=2), "run_count", 2),
    ],
)
def test_explicit_header_wins_per_field(explicit, name, value):
    headers = configured.headers_for(explicit)
    assert getattr(headers, name) == value
    # ... and only that field: the others stay the decorator's.
    for other, kept in OPTIONS.items():
        if other != name and getattr(explicit, other) == getattr(Headers(), other):
            assert getattr(headers, other) == kept, other


def test_extra_headers_are_joined_explicit_winning_by_name():
    base = Headers(timeout=5, extra=("trace:1", "tenant:a"))
    merged = merged_headers(base, Headers(extra=("trace:2",)))
    assert merged.timeout == 5
    assert merged.extra == ("tenant:a", "trace:2")


def test_explicit_headers_that_break_the_decorators_are_refused():
    # timeout 20 under the decorator's soft_timeout 30: a header error naming both.
    with pytest.raises(ValueError, match="soft_timeout"):
        configured.headers_for(Headers(timeout=20))


def test_delay_and_headers_delay_until_together_are_refused():
    with pytest.raises(ConfigurationError, match="not both"):
        plain.headers_for(Headers(delay_until=NOW), countdown=5, now=NOW)


def test_soft_timeout_reaches_the_header():
    assert configured.headers.soft_timeout == 30
    assert "soft-timeout:30" in configured.headers.encode().split(",")


def test_bad_soft_timeout_is_a_configuration_error():
    def f() -> None:
        return None

    f.__qualname__ = "f"
    with pytest.raises(ConfigurationError, match="soft_timeout"):
        job(timeout=5, soft_timeout=5)(f)


# -- on the wire --------------------------------------------------------------------


def test_send_countdown_puts_delay_until_on_the_request(broker):
    before = time.time()
    handle = plain.send((1,), {"b": 2}, countdown=30)
    after = time.time()
    _identity, request = receive_request(broker)
    assert request.msgid == handle
    assert before + 30 <= request.headers.delay_until <= after + 30


def test_send_eta_puts_its_unix_time_on_the_request(broker):
    eta = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    plain.send((1,), eta=eta)
    _identity, request = receive_request(broker)
    assert request.headers.delay_until == eta.timestamp()


def test_delay_in_sends_the_arguments_and_the_delay(broker):
    before = time.time()
    configured.delay_in(45, 7)
    after = time.time()
    _identity, request = receive_request(broker)
    assert request.queue == "mail"
    assert before + 45 <= request.headers.delay_until <= after + 45
    assert parse_job(request.body_text).args == (7,)
    for name, value in OPTIONS.items():
        assert getattr(request.headers, name) == value, name


def test_send_with_headers_keeps_the_decorator_options_on_the_wire(broker):
    configured.send((1,), headers=Headers(priority=5))
    _identity, request = receive_request(broker)
    assert request.headers.priority == 5
    for name, value in OPTIONS.items():
        if name != "priority":
            assert getattr(request.headers, name) == value, name


def test_guarantee_kept_on_the_wire_send_waits_for_the_ack(broker):
    sent: dict[str, Any] = {}

    def send() -> None:
        try:
            sent["handle"] = guaranteed.send((1,), headers=Headers(priority=1), countdown=10)
        finally:
            close_clients()

    thread = threading.Thread(target=send)
    thread.start()
    identity, request = receive_request(broker)
    assert request.headers.guarantee
    assert request.headers.timeout == 9
    assert request.headers.delay_until is not None
    broker.send_to(identity, Ack(msgid=new_msgid(), ack_msgid=request.msgid))
    thread.join(15)
    assert sent["handle"] == request.msgid


def test_plain_delay_sends_the_decorators_headers_unchanged(broker):
    configured.delay(3)
    _identity, request = receive_request(broker)
    assert request.headers == configured.headers
    assert request.headers.delay_until is None


def test_refused_delay_sends_nothing(broker):
    with pytest.raises(ConfigurationError, match="aware"):
        plain.send((1,), eta=datetime(2030, 1, 1))
    with pytest.raises(ConfigurationError, match=">= 0"):
        plain.delay_in(-1, 1)
    plain.delay(99)  # the next message the router gets is this one
    _identity, request = receive_request(broker)
    assert parse_job(request.body_text).args == (99,)


def test_eager_runs_a_delayed_job_now_but_still_checks_the_delay(eventmq_settings):
    eventmq_settings(EAGER=True)
    assert plain.delay_in(30, 2, b=3).result == 5
    with pytest.raises(ConfigurationError, match="aware"):
        plain.send((1,), eta=datetime(2030, 1, 1))


def test_unknown_job_option_is_a_configuration_error():
    def g() -> None:
        return None

    g.__qualname__ = "g"
    with pytest.raises(ConfigurationError, match=r"unknown option.*timout.*timeout"):
        job(timout=5)(g)  # type: ignore[call-overload]
    with pytest.raises(ConfigurationError, match="delay_until"):
        job(delay_until=NOW)(g)  # type: ignore[call-overload]


# -- headers as a mapping: every field it names is set, a default value too ---------


def test_a_mapping_can_turn_a_decorator_option_off():
    headers = configured.headers_for({"reply_requested": False, "soft_timeout": None})
    assert not headers.reply_requested
    assert headers.soft_timeout is None
    assert (headers.timeout, headers.retry_count, headers.priority) == (40, 3, -2)


def test_a_headers_object_cannot_turn_an_option_off_a_mapping_can():
    # Headers(reply_requested=False) is indistinguishable from Headers(): kept.
    assert configured.headers_for(Headers(reply_requested=False)).reply_requested
    assert not configured.headers_for({"reply_requested": False}).reply_requested


def test_a_mapping_with_an_unknown_field_is_refused():
    with pytest.raises(ConfigurationError, match=r"no header field timout.*timeout"):
        configured.headers_for({"timout": 5})


def test_a_mapping_with_a_bad_value_is_refused():
    with pytest.raises(ValueError, match="timeout"):
        configured.headers_for({"timeout": -1})


def test_mapping_delay_until_and_countdown_together_are_refused():
    with pytest.raises(ConfigurationError, match="not both"):
        plain.headers_for({"delay_until": NOW}, countdown=5, now=NOW)


def test_send_with_a_mapping_puts_it_on_the_wire(broker):
    handle = configured.send((1,), headers={"reply_requested": False, "timeout": 50})
    _identity, request = receive_request(broker)
    assert not request.headers.reply_requested
    assert request.headers.timeout == 50
    assert request.headers.retry_count == 3
    with pytest.raises(EventMQError, match="without reply_requested"):
        handle.wait(timeout=1)
