"""A worker child's pipes: one-way pipes (not a socketpair), jobs in, results out."""

from __future__ import annotations

import os
import stat
from typing import Any

from django_eventmq.jobmanager.pipe import READ_SIZE, FrameReader, frame
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


def test_the_job_manager_reads_a_result_pipe_without_blocking() -> None:
    pool = make_pool()
    try:
        child = up(pool)
        assert not os.get_blocking(child.fd)  # no poll before each read
        assert os.get_blocking(child.out_fd)
        assert pool.receive(child) == []  # nothing waiting: at once, nothing
        assert child.status is Status.UP
    finally:
        pool.close()


def test_a_reader_says_whether_its_read_took_everything_waiting() -> None:
    r, w = os.pipe()
    try:
        reader = FrameReader(r)
        os.write(w, frame(b"Jsmall"))
        assert reader.read() == [b"Jsmall"]
        assert reader.drained
        big = frame(b"J" + b"x" * READ_SIZE)  # more than one read takes
        os.set_blocking(w, False)
        os.write(w, big[: READ_SIZE + 10])
        assert reader.read() == []
        assert not reader.drained
    finally:
        os.close(r)
        os.close(w)
