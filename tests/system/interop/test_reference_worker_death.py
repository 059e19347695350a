"""OUR router with the REFERENCE job manager when one of its worker processes dies.

The reference job manager reports nothing for the job whose process died; when
it starts the replacement process it sends one more READY. Our router hands a
reference job manager its jobs with ``reply-requested``, so each job that ends
is named by a REPLY, and a READY is only a free slot: the extra READY marks no
running job finished, and the job that died waits in flight until its lease
runs out, then runs again.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from tests.support import wait_for

from .conftest import (
    INTEROP,
    REFERENCE_DEADLINE,
    our_router_with_reference_jobmanager,
    read_records,
)
from .refjobs.record import record_or_die, record_then_wait

pytestmark = INTEROP


def _held(journal: Path) -> set[str]:
    """The msgids of the jobs the router's journal holds (waiting or in flight)."""
    db = sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=10)
    try:
        rows = db.execute("SELECT msgid FROM jobs").fetchall()
    finally:
        db.close()
    return {row[0].decode() if isinstance(row[0], bytes) else row[0] for row in rows}


def test_a_dead_worker_process_credits_no_running_job_and_its_job_runs_again(
    workdir: Path, tmp_path: Path, use_broker: Callable[[str], None]
) -> None:
    # The dead job's lease: its timeout (3 s) + 1 s.
    with our_router_with_reference_jobmanager(workdir, {"EMQ_LEASE_GRACE": "1"}) as stack:
        router, _jobmanager = stack
        assert router.scratch is not None
        journal = router.scratch / "journal.sqlite3"
        use_broker(router.frontend)
        admin = router.admin()
        wait_for(lambda: admin.free_slots() == 2, REFERENCE_DEADLINE, "its 2 READY slots")
        running, died = tmp_path / "running", tmp_path / "died"
        gate = tmp_path / "gate"
        # One process runs a job until the test opens the gate; the other dies.
        slow = record_then_wait.delay("slow", out=str(running), gate=str(gate))
        wait_for(lambda: read_records(running), REFERENCE_DEADLINE, "the slow job to start")
        dying = record_or_die.delay("again", out=str(died), marker=str(tmp_path / "marker"))
        # Its second run needs a free slot: the one the replacement process's READY gave.
        wait_for(lambda: read_records(died), 3 * REFERENCE_DEADLINE, "the dead job to run again")
        # The slow job still runs: that READY did not take it for finished.
        assert str(slow) in _held(journal)
        assert len(read_records(running)) == 1
        gate.touch()
        wait_for(lambda: not _held(journal), REFERENCE_DEADLINE, "both jobs reported finished")
        assert len(read_records(running)) == 1 and len(read_records(died)) == 1
        status = admin.call("STATUS")
        assert status["processed_messages_by_queue"]["default"] == 2
        assert status["inflight_messages_by_queue"].get("default", 0) == 0
        assert str(dying) not in _held(journal)
