"""``publish()`` from Spark executors: a DataFrame's rows become events a subscriber receives.

Issue 7 asks for a publish API usable from Django code, jobs *and Spark*. The
executors have pyspark and pyzmq but no Django: they import
``django_eventmq.pubsub.api`` only. A real publisher process and a real
consumer process (``python -m django_eventmq subscribe``) on loopback; the
shared local Spark session sends from its executor threads' Python workers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.contrib.spark.conftest import PYSPARK_MISSING
from tests.pubsub.conftest import start_consumer, start_publisher, wait_events, wait_subscribed

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark", reason=PYSPARK_MISSING, exc_type=ImportError)

ROWS = 300


def _publish_partition(addr: str) -> Any:
    """What a pipeline runs on each partition (no Django on the executors)."""

    def run(rows: Iterator[Any]) -> None:
        from django_eventmq.pubsub.api import publish

        for row in rows:
            publish(f"orders.spark.{row.kind}", {"id": row.id, "kind": row.kind}, addr=addr)

    return run


def test_rows_published_from_executors_reach_a_prefix_subscriber(spark, tmp_path):
    events = tmp_path / "events.jsonl"
    publisher = start_publisher()
    consumer = start_consumer(publisher.outgoing, events)
    try:
        wait_subscribed(publisher.incoming, events)
        frame = spark.createDataFrame(
            [(i, "paid" if i % 3 else "refund") for i in range(ROWS)], ["id", "kind"]
        ).repartition(4)

        frame.foreachPartition(_publish_partition(publisher.incoming))

        received = wait_events(
            events,
            lambda found: len([e for e in found if e["handler"] == "on_order"]) >= ROWS,
            f"{ROWS} events from the executors",
            timeout=60,
        )
    finally:
        consumer.stop()
        publisher.proc.stop()
    orders = [e for e in received if e["handler"] == "on_order"]
    assert sorted(e["data"]["id"] for e in orders) == list(range(ROWS))  # each once
    assert all(e["topic"] == f"orders.spark.{e['data']['kind']}" for e in orders)
