"""``@subscriber`` handlers the test consumers run: they record each event in a file.

The file is named by ``EMQ_TEST_EVENTS`` (one JSON line per event), so the
test process can see what a consumer process received.
"""

from __future__ import annotations

import json
import os
from typing import Any

from django_eventmq import subscriber

#: Topic whose handler raises (the consumer must log it and keep going).
BOOM = "orders.boom"


def _record(handler: str, topic: str, data: Any) -> None:
    path = os.environ.get("EMQ_TEST_EVENTS")
    if not path:
        return
    line = json.dumps({"handler": handler, "topic": topic, "data": data, "pid": os.getpid()})
    with open(path, "a", encoding="utf-8") as events:
        events.write(line + "\n")


@subscriber("orders.")
def on_order(topic: str, data: Any) -> None:
    if topic == BOOM:
        raise RuntimeError("this handler fails on purpose")
    _record("on_order", topic, data)


@subscriber("audit.")
@subscriber("orders.created")
def on_audit(topic: str, data: Any) -> None:
    """Two prefixes, and one overlaps on_order's: it still runs once per event."""
    _record("on_audit", topic, data)


@subscriber("bulk.")
def on_bulk(topic: str, data: Any) -> None:
    """Burst events: records the sequence number only (their padding is large)."""
    _record("on_bulk", topic, {"seq": data.get("seq")} if isinstance(data, dict) else None)
