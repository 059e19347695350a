"""Settings: defaults match the reference, mapping and environment, clear errors."""

from __future__ import annotations

import pytest

from django_eventmq.errors import ConfigurationError
from django_eventmq.runtime.settings import Settings, from_mapping, parse_queues

FORMAT = r"write queues as 'name:weight,name:weight', e.g. 'email:30,default:10'$"
QUEUE_SPACE = r"^QUEUES: 'email 30' holds a space: " + FORMAT
QUEUE_NUMBER = r"^QUEUES: '30' is a number, not a queue name: " + FORMAT


def test_defaults_match_the_reference():
    s = Settings()
    assert s.broker_addr == "tcp://127.0.0.1:47291"
    assert s.backend_addr == "tcp://127.0.0.1:47290"
    assert s.admin_addr == "tcp://127.0.0.1:47293"
    assert s.queues == ((10, "default"),)
    assert (s.concurrency, s.heartbeat_interval, s.heartbeat_timeout) == (4, 3.0, 5.0)


def test_environment_beats_the_mapping():
    s = from_mapping(
        {"BROKER_ADDR": "tcp://10.0.0.1:1", "CONCURRENCY": 2},
        environ={"EMQ_BROKER_ADDR": "tcp://127.0.0.1:5555", "EMQ_QUEUES": "email:30,default"},
    )
    assert s.broker_addr == "tcp://127.0.0.1:5555"
    assert s.concurrency == 2
    assert s.queues == ((30, "email"), (10, "default"))


@pytest.mark.parametrize(
    ("value", "queues"),
    [
        ("email:30,default:10", ((30, "email"), (10, "default"))),
        (" email:30 , default ", ((30, "email"), (10, "default"))),
        (["email", "default"], ((10, "email"), (10, "default"))),
        ([(30, "email")], ((30, "email"),)),
        ([["email", 30]], ((30, "email"),)),
    ],
)
def test_queue_forms(value, queues):
    assert parse_queues(value) == queues


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ({"BROKER_ADR": "x"}, "unknown setting 'BROKER_ADR'"),
        ({"BROKER_ADDR": "localhost:47291"}, "not a ZeroMQ address"),
        ({"QUEUES": "email:lots"}, "weight of 'email' must be a whole number"),
        ({"QUEUES": "email,email"}, "named twice"),
        ({"QUEUES": "bad!"}, "may only hold"),
        # A weight after a space or a comma is no queue: the error says how to write one.
        ({"QUEUES": "email 30"}, QUEUE_SPACE),
        ({"QUEUES": "email: 30"}, r"QUEUES: 'email: 30' holds a space: write queues as"),
        ({"QUEUES": "email default"}, r"QUEUES: 'email default' holds a space"),
        ({"QUEUES": ["email 30"]}, QUEUE_SPACE),
        ({"QUEUES": "email,30"}, QUEUE_NUMBER),
        ({"QUEUES": ""}, "QUEUES is empty"),
        ({"CONCURRENCY": 0}, "CONCURRENCY: expected a whole number > 0"),
        ({"CONCURRENCY": "four"}, "CONCURRENCY: expected a whole number"),
        ({"EAGER": "maybe"}, "EAGER: expected true or false"),
        ({"HEARTBEAT_TIMEOUT": 1, "HEARTBEAT_INTERVAL": 3}, "must be longer than"),
        ({"CANCEL_POLICY": "nobody"}, "CANCEL_POLICY: expected 'owner' or 'any'"),
        ({"QUEUE_HIGH_WATER_MARK": -1}, "QUEUE_HIGH_WATER_MARK: expected a whole number >= 0"),
        (
            {"QUEUE_HIGH_WATER_MARK": 500, "HIGH_WATER_MARK": 500},
            r"QUEUE_HIGH_WATER_MARK: 500 is not below HIGH_WATER_MARK \(500\), so it would never",
        ),
        ({"OUTBOX_BUDGET": 0}, "OUTBOX_BUDGET: expected a whole number > 0"),
        ({"OUTBOX_PEER_BYTES": "lots"}, "OUTBOX_PEER_BYTES: expected a whole number"),
    ],
)
def test_bad_values_say_what_to_fix(mapping, message):
    with pytest.raises(ConfigurationError, match=message):
        from_mapping(mapping, environ={})


@pytest.mark.parametrize(("text", "message"), [("email 30", QUEUE_SPACE), ("30", QUEUE_NUMBER)])
def test_emq_queues_with_a_stray_weight_is_refused(text, message):
    with pytest.raises(ConfigurationError, match=message):
        from_mapping({}, environ={"EMQ_QUEUES": text})


def test_every_unknown_key_is_reported_at_once_with_a_suggestion():
    with pytest.raises(ConfigurationError) as caught:
        from_mapping({"CONCURENCY": 2, "queues": "email", "brokr_addr": "x", "ZZZ": 1}, environ={})
    message = str(caught.value)
    assert message.startswith("EVENTMQ: unknown settings ")
    assert "'CONCURENCY' (did you mean 'CONCURRENCY'?)" in message
    assert "'brokr_addr' (did you mean 'BROKER_ADDR'?)" in message
    assert "'ZZZ';" in message  # nothing close: no guess
    assert "'queues'" not in message  # known, in any case


def test_bad_environment_value_names_the_setting():
    with pytest.raises(ConfigurationError, match="CONCURRENCY"):
        from_mapping({}, environ={"EMQ_CONCURRENCY": "x"})


def test_empty_broker_means_inline():
    assert from_mapping({"BROKER_ADDR": ""}, environ={}).run_inline
    assert from_mapping({"EAGER": True}, environ={}).run_inline
    assert not from_mapping({}, environ={}).run_inline


def test_replace_validates():
    s = Settings()
    assert s.replace(concurrency=8).concurrency == 8
    with pytest.raises(ConfigurationError):
        s.replace(concurrency=-1)


def test_status_admin_addrs_from_the_mapping_or_the_environment():
    assert Settings().status_admin_addrs == ""  # emq_status and the dashboard: ADMIN_ADDR
    groups = "tcp://10.0.0.1:47293,tcp://10.0.0.2:47293;tcp://10.0.0.3:47293"
    assert from_mapping({"STATUS_ADMIN_ADDRS": groups}, environ={}).status_admin_addrs == groups
    s = from_mapping(
        {"STATUS_ADMIN_ADDRS": "tcp://10.0.0.9:47293"},
        environ={"EMQ_STATUS_ADMIN_ADDRS": groups},
    )
    assert s.status_admin_addrs == groups
    one = "ipc:///run/eventmq-admin.sock"
    assert from_mapping({}, environ={"EMQ_STATUS_ADMIN_ADDRS": one}).status_admin_addrs == one


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("tcp://10.0.0.1:47293;", r"STATUS_ADMIN_ADDRS: group 2 of .* is empty \(a stray ';'\?\)"),
        ("tcp://a:1;tcp://a:1", "STATUS_ADMIN_ADDRS: 'tcp://a:1' is in group 1 and in group 2"),
        ("tcp://a:1,,tcp://b:2", r"STATUS_ADMIN_ADDRS: element 2 of .* is empty \(a stray comma"),
        ("localhost:47293", "STATUS_ADMIN_ADDRS: 'localhost:47293' .* is not a tcp:// address"),
        (["tcp://a:1"], "STATUS_ADMIN_ADDRS: expected the routers' admin addresses as one string"),
    ],
    ids=["stray-semicolon", "in-two-groups", "stray-comma", "malformed", "not-a-string"],
)
def test_a_bad_status_admin_addrs_says_how_to_write_it(value, message):
    with pytest.raises(ConfigurationError, match=message):
        from_mapping({"STATUS_ADMIN_ADDRS": value}, environ={})
    if isinstance(value, str):
        with pytest.raises(ConfigurationError, match=message):
            from_mapping({}, environ={"EMQ_STATUS_ADMIN_ADDRS": value})
