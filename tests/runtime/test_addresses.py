"""runtime.addresses: a list of router addresses, checked in one place, walked one at a time."""

from __future__ import annotations

import pytest

from django_eventmq.errors import ConfigurationError
from django_eventmq.runtime.addresses import HANDSHAKE_WAIT, AddressCycle, parse_addresses


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("tcp://127.0.0.1:47291", ("tcp://127.0.0.1:47291",)),
        ("tcp://a:47291,tcp://b:47291", ("tcp://a:47291", "tcp://b:47291")),
        (" tcp://a:1 , tcp://b:2 ", ("tcp://a:1", "tcp://b:2")),
        ("tcp://[::1]:47291,ipc:///run/emq.sock", ("tcp://[::1]:47291", "ipc:///run/emq.sock")),
        (["tcp://a:1", " tcp://b:2"], ("tcp://a:1", "tcp://b:2")),
        ("tcp://router-1.example.com:47290", ("tcp://router-1.example.com:47290",)),
    ],
)
def test_parses_lists_in_order(value: str | list[str], expected: tuple[str, ...]) -> None:
    assert parse_addresses(value, "BROKER_ADDR") == expected


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("", "BROKER_ADDR is empty"),
        ("tcp://a:1,,tcp://b:2", "element 2 of 'tcp://a:1,,tcp://b:2' is empty"),
        ("tcp://a:1,", "element 2 of 'tcp://a:1,' is empty"),
        (" , tcp://a:1", "element 1"),
        ("tcp://a:1,http://b:2", "'http://b:2' (element 2 of"),
        ("tcp://a", "'tcp://a' (element 1 of"),
        ("tcp://a:*", "is not a tcp:// address with a port"),
        ("inproc://x", "is not a tcp:// address with a port"),
        ("tcp://a:1 tcp://b:2", "is not a tcp:// address"),
        ("tcp://a:1,tcp://a:1", "'tcp://a:1' is listed twice"),
        ([], "BROKER_ADDR is empty"),
    ],
)
def test_refuses_bad_elements_naming_the_setting_and_the_fix(
    value: str | list[str], says: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_addresses(value, "BROKER_ADDR")
    text = str(caught.value)
    assert says in text
    assert text.startswith("BROKER_ADDR")
    assert "e.g. 'tcp://" in text or "name each router once" in text


def test_a_non_string_element_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"WORKER_ADDR: element 2 is 5, not a string"):
        parse_addresses(["tcp://a:1", 5], "WORKER_ADDR")  # type: ignore[list-item]


def test_cycle_walks_the_list_and_starts_again() -> None:
    cycle = AddressCycle(("tcp://a:1", "tcp://b:2", "tcp://c:3"))
    assert cycle.several
    assert cycle.label == "tcp://a:1,tcp://b:2,tcp://c:3"
    seen = [cycle.current] + [cycle.advance() for _ in range(4)]
    assert seen == ["tcp://a:1", "tcp://b:2", "tcp://c:3", "tcp://a:1", "tcp://b:2"]


def test_one_address_keeps_the_heartbeat_timeout_several_wait_a_short_handshake() -> None:
    one = AddressCycle(("tcp://a:1",))
    assert not one.several
    assert one.advance() == "tcp://a:1"
    assert one.handshake_wait(5.0) == 5.0
    two = AddressCycle(("tcp://a:1", "tcp://b:2"))
    assert two.handshake_wait(60.0) == HANDSHAKE_WAIT
    assert two.handshake_wait(HANDSHAKE_WAIT / 2) == HANDSHAKE_WAIT / 2


def test_an_empty_cycle_is_refused() -> None:
    with pytest.raises(ConfigurationError):
        AddressCycle(())
