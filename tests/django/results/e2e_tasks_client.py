"""A Django process that enqueues tasks through the EventMQ Tasks backend and reports the results.

``python -m tests.django.results.e2e_tasks_client SCENARIO LOG RELEASE`` with
``DJANGO_SETTINGS_MODULE=tests.django.results.e2e_settings`` and ``EMQ_BROKER_ADDR``
set; prints one JSON object. Results are read with ``get_result`` (the
results table), as an application would.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.support import wait_for


def until(condition: Callable[[], Any], timeout: float) -> bool:
    """True once ``condition`` holds, False if ``timeout`` passed first: a scenario
    reports what it saw (the test asserts on it) instead of raising in this process."""
    try:
        wait_for(condition, timeout, poll=0.02)
    except AssertionError:
        return False
    return True


def finished(result: Any, timeout: float = 60.0) -> Any:
    until(lambda: result.refresh() or result.is_finished, timeout)
    return result


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
    from tests.django.results import jobs, tasks

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
        if not until(lambda: any(x.startswith("gate started") for x in jobs.lines(log)), 60):
            return {"error": "the gate job never started"}
        low = tasks.labelled.using(priority=-5).enqueue(log, "low")
        mid = tasks.labelled.enqueue(log, "mid")
        high = tasks.labelled.using(priority=50).enqueue(log, "high")
        jobs.important.delay(0)  # guarantee: ACKed, so the router has all three
        Path(release).touch()
        gate.wait(timeout=60)
        return {"results": [describe(finished(r)) for r in (low, mid, high)]}
    if scenario == "contract":
        return contract(log)
    if scenario == "busy":
        # Every worker process of the job manager is busy with this task: its
        # RUNNING record must still be written while it runs.
        waiting = tasks.waits.enqueue(log, release)
        seen = []

        def running_now() -> bool:
            waiting.refresh()
            seen.append(str(waiting.status))
            return waiting.status == "RUNNING"

        until(running_now, 30)
        running = describe(waiting)
        Path(release).touch()
        return {"running": running, "seen": sorted(set(seen)), "done": describe(finished(waiting))}
    if scenario == "redelivery":
        return redelivery(log, release)
    if scenario == "dies":
        dying = tasks.dies.enqueue(log)
        seen = set()

        def over() -> bool:
            dying.refresh()
            seen.add(str(dying.status))
            return bool(dying.is_finished)

        until(over, 90)
        return {"seen": sorted(seen), "done": describe(dying)}
    if scenario == "router_down":
        from django_eventmq.models.results import JobResult

        rows_before = JobResult.objects.count()
        try:
            tasks.multiply.enqueue(log, 1, 2)
        except Exception as exc:
            raised = f"{type(exc).__module__}.{type(exc).__qualname__}"
        else:
            raised = ""
        return {
            "raised": raised,
            "rows_before": rows_before,
            "rows_after": JobResult.objects.count(),
        }
    raise SystemExit(f"unknown scenario {scenario}")


def contract(log: str) -> dict[str, Any]:
    """What Django's own backend tests check of a result, on results a job manager made."""
    from django.tasks.base import TASK_REFRESH_ATTRS

    from tests.django.results import tasks

    ok = tasks.multiply.enqueue(log, 6, 7)
    fetched = tasks.multiply.get_result(ok.id)
    same = all(getattr(fetched, a) == getattr(ok, a) for a in TASK_REFRESH_ATTRS)
    enqueued_at = ok.enqueued_at
    finished(ok)
    bad = finished(tasks.broken.enqueue(log))
    stopped = finished(tasks.interrupted.enqueue(log))
    return {
        "ready_result_matches": same and fetched.status == "READY",
        "enqueued_at_kept": ok.enqueued_at == enqueued_at,
        "ok": describe(ok),
        "return_value": ok.return_value,
        "bad": describe(bad),
        "bad_class": bad.errors[0].exception_class.__name__,
        "bad_traceback": bad.errors[0].traceback,
        "stopped": describe(stopped),
        "stopped_class": stopped.errors[0].exception_class.__name__,
    }


def started_pids(log: str) -> list[int]:
    from tests.django.results import jobs

    return [int(line.split()[-1]) for line in jobs.lines(log) if line.startswith("waits started")]


def redelivery(log: str, release: str) -> dict[str, Any]:
    """Kill the worker process running a task; the router hands the task out again."""
    from tests.django.results import tasks

    result = tasks.waits.enqueue(log, release)
    until(lambda: started_pids(log), 60)
    first = started_pids(log)[0]
    os.kill(first, signal.SIGKILL)
    seen = set()

    def handed_out_again() -> bool:
        result.refresh()
        seen.add(str(result.status))
        return len(started_pids(log)) >= 2

    until(handed_out_again, 60)
    Path(release).touch()
    return {"pids": started_pids(log), "seen": sorted(seen), "done": describe(finished(result))}


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:4])))
