"""Unique jobs on the client: ``@job(unique_for=, unique_key=)`` become the
``unique-key`` / ``unique-for`` headers (checked sans-IO in protocol/headers.py),
and a send the router refuses raises :class:`JobNotUnique` naming the holder
(our router in a thread)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from django_eventmq.client import connection, pool
from django_eventmq.client.jobs import job
from django_eventmq.client.unique import Unique
from django_eventmq.errors import ConfigurationError, JobNotUnique, JobRejected, ProtocolError
from django_eventmq.protocol import Headers, parse_headers
from django_eventmq.protocol.unique import holder_of, not_unique_reason, unique_key
from tests.router.test_router import Harness

KEY = "0123456789abcdef" * 4


@job(unique_for=600)
def report(day: str, *, full: bool = False) -> str:
    return day


@job(unique_key=lambda account, amount: str(account), reply_requested=True)
def charge(account: int, amount: int) -> int:
    return amount


@job
def plain(a: int) -> int:
    return a


def fresh(name: str) -> Callable[..., None]:
    """A function that passes for a module-level one (a new name per test)."""

    def some_job(*args: Any) -> None: ...

    some_job.__module__ = __name__
    some_job.__name__ = some_job.__qualname__ = name
    return some_job


def test_the_default_key_is_the_job_name_and_its_arguments() -> None:
    first = report.unique_headers(None, ("2031-01-02",), {"full": True})
    again = report.unique_headers(None, ("2031-01-02",), {"full": True})
    other = report.unique_headers(None, ("2031-01-03",), {"full": True})
    assert first is not None and again is not None and other is not None
    assert first.unique_key == again.unique_key != other.unique_key
    assert first.unique_for == 600
    assert first.unique_key == unique_key(report.name, '[["2031-01-02"],{"full":true}]')
    # Keyword order does not matter; the job's name does.
    assert unique_key("a.b", '[[],{"x":1,"y":2}]') != unique_key("a.c", '[[],{"x":1,"y":2}]')


def test_arguments_whose_dict_keys_cannot_be_sorted_still_have_a_key() -> None:
    mixed = {1: "one", "two": 2}
    headers = report.unique_headers(None, ("d",), {"full": mixed})
    assert headers is not None and headers.unique_key is not None
    again = report.unique_headers(None, ("d",), {"full": dict(mixed)})
    assert again is not None and again.unique_key == headers.unique_key


def test_a_unique_key_callable_decides_what_counts_as_the_same_job() -> None:
    one = charge.unique_headers(None, (7, 100), {})
    two = charge.unique_headers(None, (7, 250), {})
    three = charge.unique_headers(None, (8, 100), {})
    assert one is not None and two is not None and three is not None
    assert one.unique_key == two.unique_key == unique_key(charge.name, "7")
    assert one.unique_key != three.unique_key
    assert one.unique_for == 0 and one.reply_requested  # the decorator's headers kept
    assert plain.unique_headers(None, (1,), {}) is None  # not unique: unchanged


def test_an_explicit_key_in_send_headers_wins() -> None:
    given = Headers(unique_key=KEY, unique_for=5)
    assert report.unique_headers(given, ("d",), {}) is given
    # Without its own unique_for it takes the decorator's.
    assert report.unique_headers(Headers(unique_key=KEY), ("d",), {}) == given.with_(unique_for=600)
    sent = report.headers_for({"unique_key": KEY})
    assert report.unique_headers(sent, ("d",), {}) == Headers(unique_key=KEY, unique_for=600)
    # A job that is not unique sends the key it is given as it is.
    assert plain.unique_headers(Headers(unique_key=KEY), (1,), {}) == Headers(unique_key=KEY)


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"unique_for": -1}, "unique_for= takes seconds >= 0"),
        ({"unique_for": "600"}, "unique_for= takes seconds >= 0"),
        ({"unique_for": float("inf")}, "unique_for= takes seconds >= 0"),
        ({"unique_key": "account"}, "unique_key= takes a callable"),
    ],
)
def test_bad_unique_options_are_refused_at_decoration(
    options: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ConfigurationError, match=fragment):
        job(**options)(fresh("refused_job"))


def test_unique_for_as_a_timedelta_is_whole_seconds_rounded_up() -> None:
    (stage,) = job(unique_for=timedelta(seconds=1.5))(fresh("timed_job")).header_stages
    assert isinstance(stage, Unique) and (stage.seconds, stage.key_of) == (2, None)


def test_a_key_callable_that_returns_no_str_is_a_configuration_error() -> None:
    def bad_key(a: int) -> int:
        return a

    keyed = job(unique_key=bad_key)(fresh("badly_keyed_job"))
    with pytest.raises(ConfigurationError, match="must return a str"):
        keyed.unique_headers(None, (1,), {})


# -- the headers, sans-IO -----------------------------------------------------------------


def test_unique_headers_round_trip_and_a_reference_peer_keeps_them() -> None:
    headers = Headers(guarantee=True, unique_key=KEY, unique_for=60)
    text = headers.encode()
    assert text == f"guarantee,unique-key:{KEY},unique-for:60"
    assert parse_headers(text) == headers
    assert parse_headers(f"unique-key:{KEY}").unique_for == 0


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("unique-key:ABCDEF0123456789", "lowercase hex"),
        ("unique-key:abc", "16 to 128"),
        (f"unique-key:{'a' * 129}", "16 to 128"),
        (f"unique-key:{KEY},unique-for:1.5", "whole number"),
        (f"unique-key:{KEY},unique-for:-3", "whole number"),
        ("unique-for:60", "without unique-key"),
        ("unique-key", "malformed"),
    ],
)
def test_bad_unique_headers_are_protocol_errors(text: str, fragment: str) -> None:
    with pytest.raises(ProtocolError, match=fragment):
        parse_headers(text)


def test_the_refusal_reason_names_the_holder_and_nothing_else_does() -> None:
    reason = not_unique_reason("m-1 2", "it is queued or running")
    assert holder_of(reason) == "m-1 2"
    assert holder_of("router is full: over its high-water mark") is None
    assert holder_of("not unique: job ") is None


# -- against our router -----------------------------------------------------------------


@pytest.fixture
def router(start_router: Callable[..., Harness], eventmq_settings: Any) -> Harness:
    h = start_router()
    eventmq_settings(BROKER_ADDR=h.router.frontend_address, ACK_TIMEOUT=2.0, ACK_RETRIES=1)
    yield h
    pool.close_clients()


def test_a_second_send_of_a_unique_job_raises_job_not_unique(router: Harness) -> None:
    first = report.delay("2031-01-02")
    with pytest.raises(JobNotUnique) as refused:
        report.delay("2031-01-02")
    assert refused.value.holder == first and refused.value.msgid != first
    assert isinstance(refused.value, JobRejected)  # caught as any refusal too
    assert "queued or running" in str(refused.value)
    report.delay("2031-01-03")  # other arguments: another key
    # The refused job's REJECT was not kept as an outcome for a handle nobody has.
    client = pool.get_client(router.router.frontend_address)
    assert isinstance(client, connection.Client)
    assert refused.value.msgid not in client.inbox.outcomes
    assert router.ask("MONITOR")["unique_refused"] == 1


def test_the_same_msgid_sent_again_is_acknowledged_not_refused(router: Harness) -> None:
    first = report.send(("again",), msgid="fixed-msgid-1")
    assert report.send(("again",), msgid="fixed-msgid-1") == first
    assert router.ask("MONITOR")["duplicates"] == 1


def test_a_unique_job_in_send_many_is_refused_in_the_result(router: Harness) -> None:
    from django_eventmq.protocol import Request

    taken = charge.delay(5, 1)
    client = pool.get_client(router.router.frontend_address)
    assert isinstance(client, connection.Client)
    requests = [
        Request(
            msgid=f"bulk-{account}",
            queue=charge.queue,
            headers=charge.unique_headers(None, (account, 2), {}) or charge.headers,
            body_text=charge.encode_body((account, 2), {}),
        )
        for account in (5, 6)
    ]
    result = client.send_many(requests)
    assert list(result.rejected) == ["bulk-5"]  # account 5 is held by `taken`
    assert holder_of(result.rejected["bulk-5"]) == taken


@pytest.mark.django_db(transaction=True)
def test_delay_on_commit_outside_a_transaction_sends_the_key_at_once(router: Harness) -> None:
    first = report.delay_on_commit("on-commit")
    with pytest.raises(JobNotUnique) as refused:
        report.delay("on-commit")
    assert refused.value.holder == first
