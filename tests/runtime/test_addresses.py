"""runtime.addresses: router groups and their members, checked in one place; a group
walked one address at a time; the group a client's job goes to first."""

from __future__ import annotations

import pytest

from django_eventmq.errors import ConfigurationError
from django_eventmq.runtime.addresses import (
    HANDSHAKE_WAIT,
    AddressCycle,
    ShardChooser,
    check_shard_by,
    parse_addresses,
    parse_groups,
    shard_of_queue,
)
from django_eventmq.runtime.settings import Settings


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


# -- several groups (shards) ---------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("tcp://a:1", (("tcp://a:1",),)),
        ("tcp://a:1,tcp://b:1", (("tcp://a:1", "tcp://b:1"),)),
        (["tcp://a:1", "tcp://b:1"], (("tcp://a:1", "tcp://b:1"),)),
        ("tcp://a:1;tcp://c:1", (("tcp://a:1",), ("tcp://c:1",))),
        (
            "tcp://a:1,tcp://b:1; tcp://c:1 , tcp://d:1",
            (("tcp://a:1", "tcp://b:1"), ("tcp://c:1", "tcp://d:1")),
        ),
        ("tcp://a:1;tcp://b:1;ipc:///run/c", (("tcp://a:1",), ("tcp://b:1",), ("ipc:///run/c",))),
    ],
)
def test_groups_are_separated_by_semicolons_members_by_commas(
    value: str | list[str], expected: tuple[tuple[str, ...], ...]
) -> None:
    assert parse_groups(value, "BROKER_ADDR") == expected
    # Every member of every group, in order (what a one-group peer always got).
    assert parse_addresses(value, "BROKER_ADDR") == tuple(a for g in expected for a in g)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("tcp://a:1;", "group 2 of 'tcp://a:1;' is empty (a stray ';'?)"),
        (";tcp://a:1", "group 1 of ';tcp://a:1' is empty"),
        ("tcp://a:1;;tcp://b:1", "group 2 of 'tcp://a:1;;tcp://b:1' is empty"),
        ("tcp://a:1; ;tcp://b:1", "group 2 of"),
        ("tcp://a:1;tcp://b:1,", "element 2 of 'tcp://b:1,' is empty"),
        ("tcp://a:1;http://b:1", "'http://b:1' (element 1 of 'http://b:1')"),
        ("tcp://a:1,tcp://b:1;tcp://b:1", "'tcp://b:1' is in group 1 and in group 2"),
        ("tcp://a:1;tcp://a:1", "'tcp://a:1' is in group 1 and in group 2"),
    ],
)
def test_bad_groups_are_refused_naming_the_setting_and_the_fix(value: str, says: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_groups(value, "WORKER_ADDR")
    text = str(caught.value)
    assert text.startswith("WORKER_ADDR")
    assert says in text
    assert "semicolon" in text or "e.g. 'tcp://" in text or "name it once" in text


def test_settings_take_several_groups_whose_value_has_a_comma() -> None:
    # runtime/settings.py checks a value with a comma through parse_addresses.
    s = Settings(
        broker_addr="tcp://a:1,tcp://b:1;tcp://c:1", worker_addr="tcp://a:2;tcp://c:2,tcp://d:2"
    )
    assert len(parse_groups(s.broker_addr, "BROKER_ADDR")) == 2
    with pytest.raises(ConfigurationError, match=r"BROKER_ADDR: group 2 of .* is empty"):
        Settings(broker_addr="tcp://a:1,tcp://b:1;")


def test_settings_take_groups_of_one_member() -> None:
    s = Settings(broker_addr="tcp://a:1;tcp://c:1", worker_addr="tcp://a:2;tcp://c:2")
    assert parse_groups(s.broker_addr, "BROKER_ADDR") == (("tcp://a:1",), ("tcp://c:1",))
    with pytest.raises(ConfigurationError, match="WORKER_ADDR"):
        Settings(worker_addr="tcp://a:2;nowhere")


def test_settings_check_shard_by() -> None:
    assert Settings(shard_by="round_robin").shard_by == "round_robin"
    with pytest.raises(ConfigurationError, match=r"SHARD_BY: 'random' .* use 'queue'"):
        Settings(shard_by="random")


def test_shard_by_is_queue_or_round_robin() -> None:
    assert check_shard_by("queue") == "queue"
    assert check_shard_by("round_robin") == "round_robin"
    with pytest.raises(ConfigurationError, match=r"SHARD_BY: 'random' .* use 'queue' .* or "):
        check_shard_by("random")
    with pytest.raises(ConfigurationError, match="SHARD_BY"):
        ShardChooser(2, "hash")
    with pytest.raises(ConfigurationError, match="at least one router group"):
        ShardChooser(0)


def test_a_queue_always_goes_to_the_same_group_first_in_every_process() -> None:
    # CRC-32 of the name, not hash(): the same in every process and on every host
    # (a client and the next one must agree, whatever PYTHONHASHSEED says).
    names = ("default", "email", "reports", "q0", "q1")
    assert [shard_of_queue(q, 2) for q in names] == [1, 0, 1, 0, 0]
    assert [shard_of_queue(q, 3) for q in names[:3]] == [1, 2, 1]
    assert shard_of_queue(b"email", 3) == shard_of_queue("email", 3)
    chooser = ShardChooser(3)
    first = chooser.first("email")
    assert all(chooser.first("email") == first for _ in range(10))
    # The others follow in ring order: a down group's jobs all go to one next group.
    assert chooser.order("email") == [first, (first + 1) % 3, (first + 2) % 3]
    # Queues spread over the groups.
    assert {chooser.first(f"queue{n}") for n in range(50)} == {0, 1, 2}


def test_round_robin_takes_the_groups_in_turn_whatever_the_queue() -> None:
    chooser = ShardChooser(3, "round_robin")
    assert [chooser.first("email") for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert chooser.order("other") == [1, 2, 0]


def test_one_group_is_always_group_zero() -> None:
    assert ShardChooser(1).order("anything") == [0]
    assert ShardChooser(1, "round_robin").order("x") == [0]
