"""A Django process that enqueues tasks through the EventMQ Tasks backend and reports the results.

``python -m tests.lifecycle.e2e_tasks_client SCENARIO LOG RELEASE`` with
``DJANGO_SETTINGS_MODULE=tests.lifecycle.e2e_settings`` and ``EMQ_BROKER_ADDR``
set; prints one JSON object. Results are read with ``get_result`` (the
results table), as an application would.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any


def finished(result: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result.refresh()
        if result.is_finished or time.monotonic() > deadline:
            return result
        time.sleep(0.05)


def describe(result: Any) -> dict[str, Any]:
    return {
        "id": result.id,
        "status": str(result.status),
        "value": result.return_value if result.status == "SUCCESSFUL" else None,
        "errors": [e.exception_class_path for e in result.errors],
        "started_at": result.started_at.timestamp() if result.started_at else None,
        "enqueued_at": result.enqueued_at.timestamp() if result.enqueued_at else None,
        "worker_ids": result.worker_ids,
        "attempts": result.attempts,
    }


def main(scenario: str, log: str, release: str) -> dict[str, Any]:
    import django

    django.setup()
    from tests.lifecycle import jobs, tasks

    if scenario == "basic":
        ok = tasks.multiply.enqueue(log, 6, 7)
        bad = tasks.broken.enqueue(log)
        first = tasks.multiply.get_result(ok.id)
        return {
            "first_status": str(first.status),
            "ok": describe(finished(ok)),
            "bad": describe(finished(bad)),
        }
    if scenario == "defer":
        run_after = datetime.now(UTC) + timedelta(seconds=1)
        deferred = tasks.labelled.using(run_after=run_after).enqueue(log, "deferred")
        return {"run_after": run_after.timestamp(), "deferred": describe(finished(deferred))}
    if scenario == "priority":
        gate = jobs.gate.delay(log, release)
        deadline = time.monotonic() + 60
        while not any(line.startswith("gate started") for line in jobs.lines(log)):
            if time.monotonic() > deadline:
                return {"error": "the gate job never started"}
            time.sleep(0.02)
        low = tasks.labelled.using(priority=-5).enqueue(log, "low")
        mid = tasks.labelled.enqueue(log, "mid")
        high = tasks.labelled.using(priority=50).enqueue(log, "high")
        jobs.important.delay(0)  # guarantee: ACKed, so the router has all three
        Path(release).touch()
        gate.wait(timeout=60)
        return {"results": [describe(finished(r)) for r in (low, mid, high)]}
    raise SystemExit(f"unknown scenario {scenario}")


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:4])))
