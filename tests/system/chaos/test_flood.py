"""Flood: a producer queues far more jobs than any worker takes; the router's memory
stays bounded (waiting jobs are on disk, a window per queue in memory) and every
job is acknowledged and kept.

Bounded form (CI): 200,000 jobs. The full form by hand:
``EMQ_FLOOD_JOBS=1000000 pytest tests/system/chaos/test_flood.py -s -o timeout=900``.
"""

from __future__ import annotations

import os
from pathlib import Path

from django_eventmq.client.connection import Client
from tests.support import tcp_addr
from tests.system.chaos.support import admin_call, body, memory_kib, start_router

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
    client = Client(frontend)
    payload = body("flood")

    def send(first: int, end: int) -> int:
        """Send jobs ``first..end-1`` with our client's guaranteed bulk send; resends."""
        result = client.send_many(
            ((b"flood-%d" % i, b"default", b"guarantee", payload) for i in range(first, end)),
            window=5000,
            ack_timeout=30,
        )
        assert result.acked == end - first and not result.rejected  # nothing refused
        return result.resent

    try:
        quarter = JOBS // 4
        resent = send(0, quarter)
        early = memory_kib(router.pid)
        resent += send(quarter, JOBS)
        peak = memory_kib(router.pid)
        info = admin_call(admin, "MONITOR", timeout=30)
    finally:
        client.close()
        router.stop(timeout=60)
    print(
        f"\nflood: {JOBS} jobs queued; router peak RSS {early / 1024:.0f} MiB after "
        f"{quarter}, {peak / 1024:.0f} MiB after {JOBS}; journal {info['store_bytes'] >> 20} "
        f"MiB, {info['syncs']} syncs; {resent} resent"
    )
    assert info["queued"] == JOBS  # nothing dropped
    assert info["in_memory"] <= 2 * 1000  # a window, not the queue
    assert peak < PEAK_LIMIT_MIB * 1024
    # Four times the jobs, not four times the memory: the growth after the
    # first quarter (transient peaks of batches in flight) is a small fraction
    # of what holding those jobs in memory would take (~1 KiB each).
    assert peak - early < (JOBS - quarter) // 4
