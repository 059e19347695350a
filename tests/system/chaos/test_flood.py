"""Flood: a producer queues far more jobs than any worker takes; the router's memory
stays bounded (waiting jobs are on disk, a window per queue in memory) and every
job is acknowledged and kept.

Bounded form (CI): 200,000 jobs in batches, 100,000 sent one at a time. The full
form by hand: ``EMQ_FLOOD_JOBS=1000000 EMQ_FLOOD_SINGLE_JOBS=1000000 pytest
tests/system/chaos/test_flood.py -s -o timeout=900``.
"""

from __future__ import annotations

import os
from pathlib import Path

from django_eventmq.client.connection import Client
from tests.support import Proc, tcp_addr, wait_for
from tests.system.chaos.support import admin_call, body, memory_kib, start_router

JOBS = int(os.environ.get("EMQ_FLOOD_JOBS", "200000"))
#: Jobs sent one REQUEST at a time, as ``.delay()`` in a loop does.
SINGLE_JOBS = int(os.environ.get("EMQ_FLOOD_SINGLE_JOBS", "100000"))
#: Router peak RSS allowed, whatever the number of jobs (MiB). The router
#: process itself (Python, pyzmq, SQLite) takes about 40 MiB.
PEAK_LIMIT_MIB = 64


def flood_router(tmp_path: Path, jobs: int, **env: str) -> tuple[Proc, str, str]:
    """A router (no job manager) that takes ``jobs`` waiting jobs: it, its frontend, its admin."""
    frontend, backend, admin = tcp_addr(), tcp_addr(), tcp_addr()
    journal = tmp_path / "journal.sqlite3"
    router = start_router(
        frontend, backend, admin, journal, EMQ_HIGH_WATER_MARK=str(jobs + 1), **env
    )
    return router, frontend, admin


def test_a_flood_of_queued_jobs_keeps_router_memory_bounded(tmp_path: Path) -> None:
    router, frontend, admin = flood_router(tmp_path, JOBS, EMQ_JOURNAL_SYNC="normal")
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


def test_jobs_sent_one_at_a_time_keep_router_memory_bounded(tmp_path: Path) -> None:
    """A client that sends REQUESTs faster than the router stores them: what the
    router has not read yet waits in the client's socket, not in the router (its
    frontend reads ahead a bounded number per client), and no send waits long
    enough to fail (SEND_TIMEOUT)."""
    router, frontend, admin = flood_router(tmp_path, SINGLE_JOBS)
    client = Client(frontend)
    payload = body("single")
    try:
        sent = client.send_many(
            ((b"single-%d" % i, b"default", b"", payload) for i in range(SINGLE_JOBS)),
            guarantee=False,  # as .delay() sends: no ACK awaited, nothing resent
        )
        assert sent.counts["default"].sent == SINGLE_JOBS

        def stored() -> dict[str, int] | None:
            info = admin_call(admin, "MONITOR", timeout=30)
            return info if info["queued"] >= SINGLE_JOBS else None

        info = wait_for(stored, 120, "every job sent one at a time to be stored", poll=0.2)
        peak = memory_kib(router.pid)
    finally:
        client.close()
        router.stop(timeout=60)
    print(f"\nflood: {SINGLE_JOBS} jobs sent one at a time; router peak RSS {peak / 1024:.0f} MiB")
    assert info["queued"] == SINGLE_JOBS  # each stored once
    assert peak < PEAK_LIMIT_MIB * 1024
