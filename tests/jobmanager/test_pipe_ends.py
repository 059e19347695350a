"""A worker child's pipes: one-way pipes (not a socketpair), jobs in, results out."""

from __future__ import annotations

import os
import stat
from typing import Any

from django_eventmq.jobmanager.pool import Status
from django_eventmq.protocol.status import JobStatus
from tests.fake_router import body
from tests.jobmanager.test_pool import make_pool, run_one, up
from tests.support import wait_for


def test_a_child_reads_jobs_and_writes_results_on_two_one_way_pipes() -> None:
    pool = make_pool()
    try:
        child = up(pool)
        assert child.out_fd != child.fd
        for fd in (child.fd, child.out_fd):
            assert stat.S_ISFIFO(os.fstat(fd).st_mode)
        assert run_one(pool, child, 1, body("add", 2, 3)) == (1, JobStatus.OK, '{"value":5}')
        assert run_one(pool, child, 2, body("add", 4, 5)) == (2, JobStatus.OK, '{"value":9}')
    finally:
        pool.close()


def test_a_child_whose_job_pipe_closes_exits_and_shows_as_dead() -> None:
    pool = make_pool()
    try:
        child = up(pool)
        assert child.jobs_conn is not None
        child.jobs_conn.close()  # as if the job manager went away: EOF on its job pipe

        def gone(*_: Any) -> bool:
            pool.receive(child)
            return child.status is Status.DEAD

        wait_for(gone, 10, "the child's exit seen on its result pipe")
        child.process.join(10)
        assert child.process.exitcode == 0
    finally:
        pool.close()
