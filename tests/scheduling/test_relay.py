"""The outbox relay's rules, on a store in memory and a list for the socket."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from django_eventmq.protocol import Request
from django_eventmq.scheduling.relay import OutboxRelay, OutboxRow

NOW = datetime(2026, 1, 1, tzinfo=UTC)


class Store:
    def __init__(self) -> None:
        #: msgid -> (row, written at)
        self.rows: dict[str, tuple[OutboxRow, datetime]] = {}

    def add(self, msgid: str, age: float, headers: str = "guarantee") -> None:
        row = OutboxRow(msgid, "default", headers, '["run",{}]')
        self.rows[msgid] = (row, NOW - timedelta(seconds=age))

    def due(self, before: datetime, limit: int) -> list[OutboxRow]:
        found = sorted((at, row) for row, at in self.rows.values() if at < before)
        return [row for _at, row in found][:limit]

    def delete(self, msgids: Sequence[str]) -> None:
        for msgid in msgids:
            self.rows.pop(msgid, None)


@pytest.fixture
def store() -> Store:
    return Store()


@pytest.fixture
def relay(store: Store) -> OutboxRelay:
    return OutboxRelay(store, after=5, every=1, resend=2)


def _turn(relay: OutboxRelay, mono: float) -> list[str]:
    sent: list[Request] = []
    relay.turn(sent.append, NOW, mono)
    return [r.msgid for r in sent]


def test_only_rows_older_than_the_wait_are_sent_as_written(store, relay):
    store.add("old", age=6)
    store.add("young", age=1)
    sent: list[Request] = []
    assert relay.turn(sent.append, NOW, 100.0) == 1
    [request] = sent
    assert (request.msgid, request.queue, request.body_text) == ("old", "default", '["run",{}]')
    assert request.headers.guarantee


def test_an_acknowledged_row_is_deleted_and_an_unanswered_one_sent_again(store, relay):
    store.add("a", age=10)
    store.add("b", age=10)
    assert _turn(relay, 100.0) == ["a", "b"]
    assert relay.acked("a") and not relay.acked("not-ours")
    assert _turn(relay, 101.0) == []  # b waits ``resend`` seconds for its ACK
    assert sorted(store.rows) == ["b"]
    assert _turn(relay, 102.5) == ["b"]


def test_a_refusal_that_passes_keeps_the_row_one_for_good_deletes_it(store, relay):
    store.add("full", age=10)
    store.add("bad", age=10)
    _turn(relay, 100.0)
    assert relay.refused("full", "router is full: over its high-water mark")
    assert relay.refused("bad", "job not allowed on this queue")
    assert not relay.refused("other", "whatever")
    _turn(relay, 101.0)
    assert sorted(store.rows) == ["full"]
    assert _turn(relay, 102.5) == ["full"]


def test_nothing_is_sent_without_a_router_but_answered_rows_are_deleted(store, relay):
    store.add("a", age=10)
    _turn(relay, 100.0)
    relay.acked("a")
    assert relay.turn(None, NOW, 101.0) == 0
    assert store.rows == {}


def test_a_row_that_cannot_be_sent_is_said_once_and_left(store, relay, caplog):
    store.add("broken", age=10, headers="retry-count:nope")
    store.add("fine", age=10)
    caplog.set_level(logging.ERROR, "django_eventmq.scheduler")
    assert _turn(relay, 100.0) == ["fine"]
    assert _turn(relay, 110.0) == ["fine"]
    said = [r.getMessage() for r in caplog.records if "broken" in r.getMessage()]
    assert len(said) == 1 and "left in the outbox table" in said[0], said
    assert "broken" in store.rows


def test_a_failing_outbox_table_is_said_once_and_the_schedule_database_not_blamed(caplog):
    # A site not migrated for the outbox yet: the relay's every turn fails. Said with
    # the schedule store's failures, the two flapped "failed" / "works again" each turn.
    from django_eventmq.runtime.settings import Settings
    from django_eventmq.scheduling.scheduler import Scheduler
    from tests.scheduling.fakes import MemoryStore

    def missing() -> None:
        raise LookupError("no such table: django_eventmq_outboxjob")

    scheduler = Scheduler(Settings(broker_addr="tcp://127.0.0.1:9"), MemoryStore(), outbox=Store())
    caplog.set_level(logging.WARNING, "django_eventmq.scheduler")
    for _ in range(3):
        assert scheduler._guarded(lambda: 1) == 1
        assert scheduler._guarded(missing, "outbox table") is None
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "scheduler: outbox table failed: LookupError: no such table: django_eventmq_outboxjob"
    ], said
