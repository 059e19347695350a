"""Flood: a producer queues far more jobs than any worker takes; the router's memory
stays bounded (waiting jobs are on disk, a window per queue in memory) and every
job is acknowledged and kept.

Bounded form (CI): 200,000 jobs. The full form by hand:
``EMQ_FLOOD_JOBS=1000000 pytest tests/chaos/test_flood.py -s -o timeout=900``.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.chaos.support import Producer, admin_call, body, memory_kib, start_router
from tests.support import tcp_addr

JOBS = int(os.environ.get("EMQ_FLOOD_JOBS", "200000"))
#: Router peak RSS allowed, whatever the number of jobs (MiB). The router
#: process itself (Python, pyzmq, SQLite) takes about 40 MiB.
PEAK_LIMIT_MIB = 160


def test_a_flood_of_queued_jobs_keeps_router_memory_bounded(tmp_path: Path) -> None:
    frontend, backend, admin = tcp_addr(), tcp_addr(), tcp_addr()
    router = start_router(
        frontend,
        backend,
        admin,
        tmp_path / "journal.sqlite3",
        EMQ_HIGH_WATER_MARK=str(JOBS + 1),
        EMQ_JOURNAL_SYNC="normal",
    )
    producer = Producer(frontend, window=5000)
    try:
        payload = body("flood")
        quarter = JOBS // 4
        producer.run(((f"flood-{i}", payload) for i in range(quarter)), ack_timeout=30)
        early = memory_kib(router.pid)
        producer.run(((f"flood-{i}", payload) for i in range(quarter, JOBS)), ack_timeout=30)
        peak = memory_kib(router.pid)
        info = admin_call(admin, "MONITOR", timeout=30)
    finally:
        producer.close()
        router.stop(timeout=60)
    print(
        f"\nflood: {JOBS} jobs queued; router peak RSS {early / 1024:.0f} MiB after "
        f"{quarter}, {peak / 1024:.0f} MiB after {JOBS}; journal {info['store_bytes'] >> 20} "
        f"MiB, {info['syncs']} syncs; {producer.resent} resent"
    )
    assert info["queued"] == JOBS  # nothing dropped
    assert info["in_memory"] <= 2 * 1000  # a window, not the queue
    assert producer.rejected == 0
    assert peak < PEAK_LIMIT_MIB * 1024
    # Four times the jobs, not four times the memory: the growth after the
    # first quarter (transient peaks of batches in flight) is a small fraction
    # of what holding those jobs in memory would take (~1 KiB each).
    assert peak - early < (JOBS - quarter) // 4
