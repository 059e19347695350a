"""OUR client (``@job(...).delay()``) -> OUR router -> the REFERENCE job manager."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from django_eventmq.protocol import Headers
from tests.support import Proc, wait_for

from .conftest import (
    INTEROP,
    REFERENCE_DEADLINE,
    Router,
    our_router_with_reference_jobmanager,
    wait_records,
    without_pid,
)
from .refjobs.record import record, record_then_wait

pytestmark = INTEROP


@pytest.fixture(scope="module")
def stack(workdir: Path) -> Iterator[tuple[Router, Proc]]:
    """Our router with the reference job manager (-Q default -J 2) connected."""
    with our_router_with_reference_jobmanager(workdir) as stack:
        yield stack


def test_reference_jobmanager_registers_and_offers_its_slots(
    stack: tuple[Router, Proc],
) -> None:
    """INFORM is ACKed; after our HEARTBEAT it starts its 2 processes and sends READY for each."""
    router, jobmanager = stack
    admin = router.admin()
    slots = wait_for(
        lambda: admin.free_slots() >= 2 and admin.free_slots(),
        REFERENCE_DEADLINE,
        "2 READY slots from the reference job manager (it sends READY only after a HEARTBEAT)",
    )
    assert slots == 2
    (worker,) = admin.call("ROUTER_SHOW_WORKERS")["connected_workers"].values()
    # Its INFORM carried '' for "-Q default": our router reads that as the default queue.
    assert [name for _weight, name in worker["queues"]] == ["default"]
    assert jobmanager.popen.poll() is None


def test_our_job_runs_on_reference_jobmanager(
    stack: tuple[Router, Proc], records_file: Path, use_broker: Callable[[str], None]
) -> None:
    router, _ = stack
    use_broker(router.frontend)

    msgid = record.delay(7, "x", [1, 2], out=str(records_file), flag=True)

    records = wait_records(records_file, timeout=REFERENCE_DEADLINE)
    assert without_pid(records) == [{"args": [7, "x", [1, 2]], "kwargs": {"flag": True}}]
    assert msgid
    admin = router.admin()
    wait_for(lambda: admin.processed() >= 1, 10, "STATUS counting the job once READY came back")


def test_reference_reply_is_accepted_by_our_router(
    stack: tuple[Router, Proc], records_file: Path, use_broker: Callable[[str], None]
) -> None:
    """With reply-requested the reference sends REPLY(payload, msgid); our router takes it."""
    router, jobmanager = stack
    admin = router.admin()
    use_broker(router.frontend)
    before = admin.processed()

    record.send(("r",), {"out": str(records_file)}, headers=Headers(reply_requested=True))

    assert without_pid(wait_records(records_file, timeout=REFERENCE_DEADLINE)) == [
        {"args": ["r"], "kwargs": {}}
    ]
    wait_for(lambda: admin.processed() > before, 10, "STATUS counting the replied job")
    status = admin.call("STATUS")
    assert status["inflight_messages_by_queue"].get("default", 0) == 0
    assert router.alive() and jobmanager.popen.poll() is None


def test_status_jobs_shows_a_reference_job_manager_s_job_without_its_process(
    stack: tuple[Router, Proc],
    records_file: Path,
    use_broker: Callable[[str], None],
    tmp_path: Path,
) -> None:
    """The reference job manager does not say what its processes run: ROUTER_SHOW_JOBS
    lists its job as handed out, with the job's name and queue and no pid."""
    router, _ = stack
    admin = router.admin()
    use_broker(router.frontend)
    gate = tmp_path / "gate"
    msgid = record_then_wait.delay("long", out=str(records_file), gate=str(gate))
    try:
        wait_records(records_file, timeout=REFERENCE_DEADLINE)
        (row,) = [j for j in admin.call("ROUTER_SHOW_JOBS")["jobs"] if j["msgid"] == msgid]
        assert row["job"] == "tests.system.interop.refjobs.record.record_then_wait"
        assert (row["queue"], row["state"], row["pid"]) == ("default", "handed_out", None)
        assert row["age"] >= 0
    finally:
        gate.touch()
    wait_for(
        lambda: not [j for j in admin.call("ROUTER_SHOW_JOBS")["jobs"] if j["msgid"] == msgid],
        REFERENCE_DEADLINE,
        "the job off the list once it finished",
    )
