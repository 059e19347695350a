"""Writing a rate limit: the headers, ``@job(rate_limit=)``, the RATE_LIMITS setting,
``--rate-limit`` and what ``emq_status`` shows. Every bad form is refused with a
message that says how to write one."""

from __future__ import annotations

import argparse

import pytest

from django_eventmq.cli import status
from django_eventmq.cli.options import add_router_arguments, settings_from_options
from django_eventmq.cli.status import Snapshot
from django_eventmq.client.jobs import job
from django_eventmq.errors import ConfigurationError, ProtocolError
from django_eventmq.protocol import parse_headers
from django_eventmq.protocol.headers import parse_rate, rate_of
from django_eventmq.runtime.settings import Settings, from_mapping

HOW = "use 'N/unit'"


def plain() -> None:
    """Decorated by the tests themselves."""


@job(rate_limit="100/m")
def limited() -> None: ...


@job(rate_limit=5, rate_key="provider")
def shared() -> None: ...


@pytest.mark.parametrize(
    ("given", "count", "period", "text"),
    [
        ("100/m", 100, 60.0, "100/m"),
        ("10/5s", 10, 5.0, "10/5s"),
        (" 3 / h ", 3, 3600.0, "3/h"),
        ("1/d", 1, 86400.0, "1/d"),
        (5, 5, 1.0, "5/s"),
        ("7", 7, 1.0, "7/s"),
    ],
)
def test_rates_are_read_in_each_form(given: object, count: int, period: float, text: str) -> None:
    rate = parse_rate(given)
    assert (rate.count, rate.period, rate.text) == (count, period, text)


@pytest.mark.parametrize(
    "bad", ["100/x", "100", "m/100", "0/s", "1.5/s", "-1/s", "100/0m", "", 2.5, True, None]
)
def test_bad_rates_are_refused_saying_how_to_write_one(bad: object) -> None:
    if bad == "100":
        assert parse_rate(bad).text == "100/s"  # a whole number alone is per second
        return
    with pytest.raises(ProtocolError, match=r"rate limit .*(N/unit|the count must be)"):
        parse_rate(bad)


def test_a_count_above_the_cap_is_refused_with_a_shorter_period_to_use() -> None:
    with pytest.raises(ProtocolError, match="use a shorter period"):
        parse_rate("100001/d")


def test_rate_headers_are_checked_when_parsed_and_kept_as_written() -> None:
    headers = parse_headers("guarantee,rate-limit:100/m,rate-key:app.send")
    assert headers.guarantee and headers.extra == ("rate-limit:100/m", "rate-key:app.send")
    assert headers.encode() == "guarantee,rate-limit:100/m,rate-key:app.send"
    raw = b"guarantee,rate-limit:100/m,rate-key:app.send"
    assert rate_of(raw) == ("app.send", parse_rate("100/m"))
    assert rate_of(b"rate-limit:2/s") == ("", parse_rate("2/s"))  # no key: the empty one
    assert rate_of(b"guarantee") is None
    for bad in ("rate-limit:100/x", "rate-limit", "rate-key", "rate-key:"):
        with pytest.raises(ProtocolError):
            parse_headers(bad)


def test_the_decorator_puts_the_limit_and_the_jobs_name_in_the_headers() -> None:
    assert limited.headers.extra == (
        "rate-limit:100/m",
        f"rate-key:{__name__}.limited",
    )
    assert shared.headers.extra == ("rate-limit:5/s", "rate-key:provider")


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"rate_limit": "100/x"}, HOW),
        ({"rate_limit": 0}, "the count must be"),
        ({"rate_key": "k"}, "rate_key= needs rate_limit="),
        ({"rate_limit": "1/s", "rate_key": "a,b"}, "without commas"),
    ],
)
def test_a_bad_decorator_option_names_the_job_and_how_to_fix_it(
    options: dict[str, object], match: str
) -> None:
    with pytest.raises(ConfigurationError, match=rf"@job plain: .*{match}"):
        job(**options)(plain)  # type: ignore[call-overload]


def test_the_setting_takes_a_mapping_pairs_or_text_and_the_last_of_a_queue_wins() -> None:
    expected = (("email", "100/m"), ("sms", "5/s"))
    assert from_mapping({"RATE_LIMITS": {"email": "100/m", "sms": 5}}).rate_limits == expected
    assert from_mapping({"RATE_LIMITS": [("email", "100/m"), ("sms", "5")]}).rate_limits == (
        expected
    )
    env = {"EMQ_RATE_LIMITS": "email=1/s, email=100/m,sms=5/s"}
    assert from_mapping({}, environ=env).rate_limits == expected
    assert Settings().rate_limits == ()


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ({"email": "100/x"}, r"RATE_LIMITS\['email'\]: rate limit '100/x': " + HOW),
        ({"bad queue": "1/s"}, "is not a queue name"),
        ("email", "is not 'queue=rate'"),
        (42, "expected a mapping"),
        ([("email",)], "is not \\(queue, rate\\)"),
    ],
)
def test_a_bad_setting_is_refused_saying_how_to_fix_it(value: object, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        from_mapping({"RATE_LIMITS": value})


def test_settings_built_directly_must_hold_checked_pairs() -> None:
    with pytest.raises(ConfigurationError, match="RATE_LIMITS"):
        Settings(rate_limits=(("email", "100/x"),))


def test_the_option_repeats_and_adds_to_the_setting() -> None:
    parser = argparse.ArgumentParser()
    add_router_arguments(parser)
    options = parser.parse_args(["--rate-limit", "email=100/m", "--rate-limit", "sms=5"])
    base = from_mapping({"RATE_LIMITS": {"email": "1/s", "reports": "5/h"}})
    assert settings_from_options(base, options).rate_limits == (
        ("email", "100/m"),
        ("reports", "5/h"),
        ("sms", "5/s"),
    )


def test_a_bad_option_is_a_usage_error_naming_the_value(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = argparse.ArgumentParser(prog="emq_router")
    add_router_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--rate-limit", "email=100/x"])
    err = capsys.readouterr().err
    assert "argument --rate-limit: 'email=100/x': rate limit '100/x': " + HOW in err


def test_emq_status_shows_the_limits_and_what_they_hold_back() -> None:
    answer = {
        "waiting_messages_by_queue": {"email": 412},
        "rate_limits_by_queue": {
            "email": {"limit": "100/m", "used": 100, "held_back": 412, "throttled": 0}
        },
        "rate_limits_by_key": {"app.send": {"limit": "10/s", "used": 7}},
    }
    snap = Snapshot("tcp://127.0.0.1:1", 1.0, status=answer)
    summary = status.summarize(snap)
    assert summary["rate_limits"]["queues"]["email"]["held_back"] == 412
    text = status.render(summary)
    assert "RATE-LIMITED QUEUE  LIMIT  USED  HELD BACK" in text
    assert "email               100/m   100        412" in text
    assert "app.send   10/s     7" in text
    plain_summary = status.summarize(Snapshot("tcp://127.0.0.1:1", 1.0))
    assert "rate_limits" not in plain_summary and "RATE" not in status.render(plain_summary)
