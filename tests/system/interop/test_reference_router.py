"""OUR client (``@job(...).delay()``) -> the REFERENCE router -> OUR job manager."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from django_eventmq.protocol import Headers
from tests.support import Proc, wait_for

from .conftest import (
    INTEROP,
    OUR_DEADLINE,
    Router,
    wait_records,
    without_pid,
)
from .refjobs.record import record, record_email

pytestmark = INTEROP


def test_reference_router_registers_our_jobmanager(
    reference_router_stack: tuple[Router, Proc],
) -> None:
    """Our INFORM (weighted JSON queues) is understood and our READYs give it 2 slots."""
    router, _ = reference_router_stack
    admin = router.admin()
    wait_for(lambda: admin.free_slots() >= 2, OUR_DEADLINE, "2 READY slots at the reference")
    (worker,) = admin.call("ROUTER_SHOW_WORKERS")["connected_workers"].values()
    assert sorted(worker["queues"]) == [[10, "default"], [30, "email"]]


def test_our_job_runs_through_reference_router(
    reference_router_stack: tuple[Router, Proc],
    records_file: Path,
    use_broker: Callable[[str], None],
) -> None:
    router, _ = reference_router_stack
    use_broker(router.frontend)

    record.delay({"nested": {"a": [1, 2.5]}}, "é", out=str(records_file), n=3)

    assert without_pid(wait_records(records_file)) == [
        {"args": [{"nested": {"a": [1, 2.5]}}, "é"], "kwargs": {"n": 3}}
    ]


def test_our_reply_completes_the_job_at_reference_router(
    reference_router_stack: tuple[Router, Proc],
    records_file: Path,
    use_broker: Callable[[str], None],
) -> None:
    """Our job manager's REPLY has the reference's shape: it logs the job as completed.

    (The reference's STATUS ``processed_messages_by_queue`` counts dispatches,
    not completions; its only sign of a REPLY is the log line.)
    """
    router, jobmanager = reference_router_stack
    use_broker(router.frontend)

    email_id = record_email.delay("mail", out=str(records_file))  # email, reply-requested
    default_id = record.send(
        ("default",), {"out": str(records_file)}, headers=Headers(reply_requested=True)
    )

    records = wait_records(records_file, count=2)
    assert sorted(r["args"][0] for r in records) == ["default", "mail"]
    for queue, msgid in (("email", email_id), ("default", default_id)):
        line = f"Completed {queue} job with msgid: {msgid}"
        wait_for(
            lambda line=line: line in router.proc.output(),  # type: ignore[misc]
            OUR_DEADLINE,
            f"the reference router taking our REPLY for the {queue} job",
        )
    assert router.alive() and jobmanager.popen.poll() is None


def test_our_jobmanager_keeps_serving_across_reference_heartbeats(
    reference_router_stack: tuple[Router, Proc],
    records_file: Path,
    use_broker: Callable[[str], None],
) -> None:
    """Over one heartbeat interval (the reference sends HEARTBEAT every 3 s) our job
    manager stays registered, keeps heartbeating, and still takes jobs."""
    router, _ = reference_router_stack
    admin = router.admin()
    use_broker(router.frontend)

    def last_heard() -> float:
        (worker,) = admin.call("ROUTER_SHOW_WORKERS")["connected_workers"].values()
        return float(worker["hb"])

    first = last_heard()
    wait_for(lambda: last_heard() - first >= 2.9, OUR_DEADLINE, "a heartbeat from our job manager")
    record.delay("late", out=str(records_file))
    assert without_pid(wait_records(records_file)) == [{"args": ["late"], "kwargs": {}}]
    assert len(admin.call("ROUTER_SHOW_WORKERS")["connected_workers"]) == 1
