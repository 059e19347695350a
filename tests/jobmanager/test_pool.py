"""The pool supervisor with real worker processes: start, reap, respawn, recycle."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from django_eventmq.jobmanager import pipe
from django_eventmq.jobmanager import pool as pool_module
from django_eventmq.jobmanager.lifecycle import Lifecycle
from django_eventmq.jobmanager.managed_job import ManagedJob
from django_eventmq.jobmanager.outcomes import Recorder
from django_eventmq.jobmanager.pool import PIPE_BUDGET, Child, Pool, Status
from django_eventmq.protocol.status import JobStatus
from django_eventmq.runtime.settings import Settings
from tests.fake_router import SAMPLE, body
from tests.jobs_fixtures.record_hooks import read_records
from tests.support import wait_for


def make_pool(**options: Any) -> Pool:
    values: dict[str, Any] = {"concurrency": 1, "job_modules": (SAMPLE,)}
    values.update(options)
    return Pool(Settings(**values))


@pytest.fixture
def pool_factory() -> Iterator[Any]:
    pools: list[Pool] = []

    def factory(**options: Any) -> Pool:
        pool = make_pool(**options)
        pools.append(pool)
        return pool

    yield factory
    for pool in pools:
        pool.close()


def collect(pool: Pool, child: Child, results: list[tuple[int, str, str]]) -> bool:
    results.extend(pool.receive(child))
    return True


def status(child: Child) -> Status:
    return child.status


def wait_up(pool: Pool, child: Child) -> None:
    wait_for(lambda: collect(pool, child, []) and child.status is Status.UP, 20, "child up")


def up(pool: Pool) -> Child:
    (child,) = pool.respawn()
    wait_up(pool, child)
    return child


def up_all(pool: Pool) -> list[Child]:
    """Start ``pool.size`` children (the pool starts one at a time while none is up)."""
    children: list[Child] = []

    def all_up() -> bool:
        children.extend(pool.respawn())
        for child in children:
            collect(pool, child, [])
        return len(children) == pool.size and all(c.status is Status.UP for c in children)

    wait_for(all_up, 30, f"{pool.size} children up")
    return children


def run_one(pool: Pool, child: Child, seq: int, text: str) -> tuple[int, str, str]:
    results: list[tuple[int, str, str]] = []
    pool.send(child, seq, f"m{seq}", text)
    wait_for(lambda: collect(pool, child, results) and results, 10, f"result of job {seq}")
    return results[0]


def test_child_starts_runs_jobs_and_counts_them(pool_factory: Any) -> None:
    pool = pool_factory()
    child = up(pool)
    assert child.pid != os.getpid()
    seq, status, payload = run_one(pool, child, 1, body("add", 2, 3))
    assert (seq, status, payload) == (1, JobStatus.OK, '{"value":5}')
    assert (child.jobs_run, child.inflight) == (1, {})


def test_killed_child_is_reaped_its_job_reported_and_replaced(
    pool_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    pool = pool_factory()
    child = up(pool)
    pool.send(child, 1, "slow-msgid", body("slow", 30))
    assert child.msgids == ["slow-msgid"]
    os.kill(child.pid, signal.SIGKILL)
    wait_for(lambda: collect(pool, child, []) and child.status is Status.DEAD, 10, "EOF")
    with caplog.at_level(logging.WARNING, "django_eventmq.pool"):
        lost = pool.reap()
    assert [(item.msgid, item.pid, item.exitcode) for item in lost] == [
        ("slow-msgid", child.pid, -signal.SIGKILL)
    ]
    assert f"pid={child.pid} exited" in caplog.text
    assert pool.children == {}
    (new,) = pool.respawn()
    assert new.pid != child.pid


def test_child_that_exits_in_a_job_is_replaced(pool_factory: Any) -> None:
    pool = pool_factory()
    child = up(pool)
    pool.send(child, 1, "crash-msgid", body("crash", 7))
    wait_for(lambda: collect(pool, child, []) and child.status is Status.DEAD, 10, "EOF")
    lost = pool.reap()
    assert [(item.msgid, item.exitcode) for item in lost] == [("crash-msgid", 7)]
    assert len(pool.respawn()) == 1


def test_child_is_recycled_after_max_jobs(
    pool_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    pool = pool_factory(max_jobs_per_child=2)
    child = up(pool)
    run_one(pool, child, 1, body("noop"))
    assert child.status is Status.UP
    run_one(pool, child, 2, body("noop"))
    assert status(child) is Status.RETIRING
    assert pool.pick(10) is None  # a retiring child takes no more jobs
    (replacement,) = pool.respawn()  # capacity is kept while it retires
    pool.check()
    assert status(child) is Status.DEAD
    with caplog.at_level(logging.WARNING, "django_eventmq.pool"):
        wait_for(lambda: pool.reap() == [] and child.exitcode is not None, 10, "reaped")
    assert child.exitcode == 0
    assert "exited" not in caplog.text  # a planned retirement is not a warning
    assert list(pool.children.values()) == [replacement]


def test_retired_child_held_alive_by_a_job_thread_is_killed_and_replaced(
    pool_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    lingering = "tests.jobs_fixtures.lingering"
    pool = pool_factory(max_jobs_per_child=1, job_modules=(SAMPLE, lingering))
    child = up(pool)
    assert run_one(pool, child, 1, body("linger", path=lingering))[1] == JobStatus.OK
    assert status(child) is Status.RETIRING
    (replacement,) = pool.respawn()

    def gone() -> bool:
        pool.check()
        for dead in pool.died():  # as the job manager does: what it said last
            pool.receive(dead)
        assert pool.reap() == []  # it held no job
        return child not in pool.children.values()

    with caplog.at_level(logging.DEBUG, "django_eventmq.pool"):
        # Told to exit, it cannot (the job's thread): after its grace it is killed.
        wait_for(gone, 30, "the stuck child killed and reaped")
    assert child.exitcode == -signal.SIGKILL
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert f"pid={child.pid} finished, but non-daemon thread(s)" in warnings[0]
    assert "(lingering)" in warnings[0] and "SIGKILL" in warnings[0]
    assert list(pool.children.values()) == [replacement]
    wait_up(pool, replacement)
    assert run_one(pool, replacement, 2, body("add", 1, 2)) == (2, JobStatus.OK, '{"value":3}')


def test_retired_child_that_is_only_slow_to_exit_is_given_its_time(
    pool_factory: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child told to exit that said it is done and no thread holds it is only slow
    (a loaded machine, a slow shutdown): it is not killed after EXIT_GRACE, it exits."""
    monkeypatch.setattr(pool_module, "EXIT_GRACE", 0.2)
    slow = "tests.jobs_fixtures.slow_exit"
    pool = pool_factory(max_jobs_per_child=1, job_modules=(SAMPLE, slow))
    child = up(pool)
    assert run_one(pool, child, 1, body("slow_exit", 1.5, path=slow))[1] == JobStatus.OK
    assert status(child) is Status.RETIRING

    def gone() -> bool:
        pool.check()
        for dead in pool.died():
            pool.receive(dead)
        assert pool.reap() == []
        return child not in pool.children.values()

    with caplog.at_level(logging.DEBUG, "django_eventmq.pool"):
        wait_for(gone, 30, "the slow child exited and was reaped")
    assert child.said_bye and child.lingering == ""
    assert child.exitcode == 0  # exited by itself, after its 1.5 s
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_child_that_cannot_start_is_logged_once_and_retried_later(
    pool_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    pool = pool_factory(job_modules=("tests.jobs_fixtures.no_such_module",))
    (child,) = pool.respawn(now=100.0)
    wait_for(lambda: collect(pool, child, []) and child.status is Status.DEAD, 20, "child fails")
    with caplog.at_level(logging.ERROR, "django_eventmq.pool"):
        # A pass waits REAP_WAIT for the exit: a loaded machine may need several.
        wait_for(
            lambda: pool.reap(now=100.0) == [] and child not in pool.children.values(),
            20,
            "the failed child reaped",
        )
    assert "failed to start" in caplog.text and "no_such_module" in caplog.text
    assert caplog.text.count("failed to start") == 1
    assert pool.respawn(now=100.1) == []  # backs off instead of spinning
    assert len(pool.respawn(now=101.0)) == 1


def test_pick_prefers_idle_children_and_respects_depth(pool_factory: Any) -> None:
    pool = pool_factory(concurrency=2, prefetch=2, prefetch_budget=0)  # depth 2 per child
    assert pool.depth == 2
    children = up_all(pool)
    text = body("slow", 30)
    first = pool.pick(len(text))
    assert first is not None
    pool.send(first, 1, "a", text)
    second = pool.pick(len(text))
    assert second is not None and second is not first
    pool.send(second, 2, "b", text)
    for seq in (3, 4):
        child = pool.pick(len(text))
        assert child is not None
        pool.send(child, seq, f"m{seq}", text)
    assert pool.pick(len(text)) is None  # both children hold `depth` jobs
    assert sorted(len(c.inflight) for c in children) == [2, 2]
    # A body too large for the pipe budget waits for an idle child.
    assert pool.pick(10**6) is None


def test_jobs_assigned_together_go_in_one_write_and_run_in_order(pool_factory: Any) -> None:
    pool = pool_factory(prefetch=2)  # depth 3
    child = up(pool)
    for seq in (1, 2, 3):
        pool.assign(child, seq, f"m{seq}", body("add", seq, seq), now=5.0)
    assert child.head == 1 and child.head_since == 5.0
    pool.flush(child)
    results: list[tuple[int, str, str]] = []
    wait_for(lambda: collect(pool, child, results) and len(results) == 3, 10, "three results")
    assert results == [(1, "ok", '{"value":2}'), (2, "ok", '{"value":4}'), (3, "ok", '{"value":6}')]
    assert (child.inflight, child.queued_bytes) == ({}, 0)


def test_kill_hands_back_queued_jobs_and_the_child_is_reaped(pool_factory: Any) -> None:
    pool = pool_factory(prefetch=2)
    child = up(pool)
    for seq in (1, 2, 3):
        pool.assign(child, seq, f"m{seq}", body("slow", 30), now=0.0)
    pool.flush(child)
    taken = pool.kill(child)
    assert taken.queued == [2, 3]
    assert child.status is Status.KILLING and child.inflight == {}
    assert pool.active() == []
    wait_for(lambda: pool.check() or child.status is Status.DEAD, 10, "killed child exits")
    assert pool.reap() == []  # its jobs were already handed back
    assert child.exitcode == -signal.SIGKILL
    assert len(pool.respawn()) == 1


def test_child_that_dies_reports_only_its_running_job_as_started(pool_factory: Any) -> None:
    pool = pool_factory(prefetch=1)
    child = up(pool)
    pool.assign(child, 1, "crash", body("crash", 4), now=0.0)
    pool.assign(child, 2, "queued", body("noop"), now=0.0)
    pool.flush(child)
    wait_for(lambda: collect(pool, child, []) and child.status is Status.DEAD, 10, "EOF")
    lost = wait_for(pool.reap, 10, "reaped")
    assert [(item.msgid, item.started) for item in lost] == [("crash", True), ("queued", False)]


def test_records_go_to_an_idle_child_or_are_written_while_a_job_runs(
    pool_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "records.jsonl"
    monkeypatch.setenv("EMQ_TEST_RECORDS_FILE", str(target))
    pool = make_pool(concurrency=2)
    pool.hooks = "tests.jobs_fixtures.record_hooks"
    try:
        busy, idle = up_all(pool)
        assert pool.can_record is True
        pool.send(busy, 1, "m1", body("slow", 30))
        batch = pipe.encode_records([{"msgid": "m0", "status": "succeeded"}])
        assert pool.send_records(batch)
        assert (busy.records, idle.records) == ([], [batch])
        wait_for(lambda: collect(pool, idle, []) and not idle.records, 10, "acknowledged")
        assert read_records(target) == [{"msgid": "m0", "status": "succeeded"}]
        # With no idle child, a busy one takes it, and writes it while its job runs.
        pool.send(idle, 2, "m2", body("slow", 30))
        later = pipe.encode_records([{"msgid": "m1", "status": "running"}])
        assert pool.send_records(later)
        taker = busy if busy.records else idle
        assert taker.records == [later] and taker.inflight
        wait_for(lambda: collect(pool, taker, []) and not taker.records, 10, "acknowledged")
        assert read_records(target)[-1] == {"msgid": "m1", "status": "running"}
        assert busy.inflight and idle.inflight  # both jobs are still running
    finally:
        pool.close(timeout=0.1)


def test_a_malformed_partial_report_is_dropped_and_the_results_still_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A report the child could not tie to a job (empty seq) must not stop the job manager."""
    import multiprocessing
    from types import SimpleNamespace

    from django_eventmq.jobmanager.pipe import frame, write_all

    ours, theirs = multiprocessing.Pipe()
    child = Child(process=SimpleNamespace(pid=4242), conn=ours, started=0.0)  # type: ignore[arg-type]
    child.status = Status.UP
    child.inflight[7] = ("m-7", 0)
    pool = make_pool()
    try:
        write_all(
            theirs.fileno(),
            frame(pipe.PARTIAL + b"\n" + b'{"value":1}')  # no seq: the job had ended
            + frame(pipe.encode_partial_frame(b"7", '{"value":2}'))
            + frame(pipe.encode_result(b"7", "ok", '{"value":3}')),
        )
        with caplog.at_level(logging.WARNING, logger="django_eventmq.pool"):
            results = pool.receive(child, now=1.0)
    finally:
        ours.close()
        theirs.close()
    assert results == [(7, "ok", '{"value":3}')]
    assert child.partials == [(7, '{"value":2}')]
    assert "malformed partial report" in caplog.text


def test_a_job_read_goes_at_once_only_to_an_idle_child() -> None:
    """``dispatch(idle_only=True)`` (the job manager's call as each job is read) hands
    jobs to idle children only; what would queue behind a running job waits for the
    turn's ``dispatch``, which writes it then."""
    import multiprocessing
    from types import SimpleNamespace

    from django_eventmq.jobmanager.pipe import FrameReader

    pool = make_pool(concurrency=2, prefetch=2, prefetch_budget=0)
    ends = []
    children = []
    for pid in (1, 2):
        ours, theirs = multiprocessing.Pipe(duplex=False)
        jobs_in, jobs_out = multiprocessing.Pipe(duplex=False)
        child = Child(
            process=SimpleNamespace(pid=pid),  # type: ignore[arg-type]
            conn=ours,
            started=0.0,
            jobs_conn=jobs_out,
            status=Status.UP,
        )
        pool.children[child.fd] = child
        children.append(child)
        ends += [ours, theirs, jobs_in, jobs_out]
    busy, idle = children
    busy.inflight[99] = ("running", 0)
    life = Lifecycle(
        Settings(concurrency=2),
        pool,
        Recorder("jm-test"),
        report=lambda job, status, payload: None,
        nack=lambda job, reason: None,
        router_retries=lambda: True,
    )
    try:
        for msgid in ("a", "b"):
            life.accept(ManagedJob(msgid, "q", body("add", 1, 2), False))
        life.dispatch(1.0, idle_only=True)
        assert idle.msgids == ["a"] and busy.msgids == ["running"]
        assert [life.jobs[seq].msgid for seq in life.pending] == ["b"]
        (written,) = FrameReader(ends[6].fileno()).read()  # idle's job pipe, read end
        assert written.startswith(pipe.JOB)
        life.dispatch(1.0)  # the turn's call: it may queue behind a running job
        assert not life.pending and "b" in idle.msgids + busy.msgids
    finally:
        for end in ends:
            end.close()


def test_a_cancel_deeper_in_the_queue_frees_its_bytes_and_leaves_the_head(
    pool_factory: Any, tmp_path: Path
) -> None:
    gated = "tests.jobs_fixtures.gated"
    pool = pool_factory(prefetch=2, prefetch_budget=0, job_modules=(SAMPLE, gated))  # depth 3
    child = up(pool)
    log, gates = tmp_path / "log.txt", [tmp_path / "gate1", tmp_path / "gate2"]
    for seq, gate in zip((1, 2), gates, strict=True):
        pool.assign(child, seq, f"m{seq}", body("gated", str(log), seq, str(gate), path=gated), 0.0)
    big = body("echo", "x" * (PIPE_BUDGET * 2 // 3))
    assert pool.pick(len(big)) is child
    pool.assign(child, 3, "m3", big, 0.0)
    pool.flush(child)
    wait_for(lambda: log.exists(), 20, "job 1 started")
    pool.cancel(child, 3)  # read by the child between jobs 1 and 2: job 3 is skipped
    results: list[tuple[int, str, str]] = []
    turn = iter(range(100, 10**9))
    at: dict[int, float] = {}

    def read() -> bool:
        now = float(next(turn))
        for result in pool.receive(child, now):
            results.append(result)
            at[result[0]] = now
        return len(results) == 2

    gates[0].touch()
    wait_for(read, 20, "job 1's result and job 3's cancel")
    assert [(seq, status) for seq, status, _ in results] == [(1, "ok"), (3, "cancelled")]
    assert list(child.inflight) == [2] and child.queued_bytes == 0
    assert child.head_since == at[1]  # job 2 runs since job 1 ended, not since the cancel
    assert pool.pick(len(big)) is child  # it takes a prefetched job again
    gates[1].touch()
    wait_for(lambda: collect(pool, child, results) and len(results) == 3, 20, "job 2's result")
    assert (child.inflight, child.queued_bytes) == ({}, 0)


def test_a_result_written_just_before_its_child_died_is_taken_not_reported_lost(
    pool_factory: Any,
) -> None:
    """A child writes a job's result and dies before the job manager reads its pipe
    (killed, out of memory): supervision sees the exit first. The result in the
    pipe is the job's outcome; reporting the job lost would run it again."""
    pool = pool_factory()
    child = up(pool)
    reported: list[tuple[str, str]] = []
    life = Lifecycle(
        Settings(concurrency=1),
        pool,
        Recorder("jm-test"),
        report=lambda job, status, payload: reported.append((job.msgid, status)),
        nack=lambda job, reason: None,
        router_retries=lambda: True,
    )
    life.accept(ManagedJob("a", "q", body("add", 1, 2), False))
    life.dispatch(1.0)
    assert child.msgids == ["a"]
    wait_for(lambda: bool(child.readable.poll(0)), 20, "the result in the pipe")
    os.kill(child.pid, signal.SIGKILL)
    wait_for(lambda: child.process.exitcode is not None, 20, "the child's exit")
    pool.check(2.0)  # it exited: DEAD, its pipe not read yet
    assert child.status is Status.DEAD
    life.lost(2.0)
    assert reported == [("a", JobStatus.OK)]


def test_a_program_a_job_starts_stops_on_sigterm(pool_factory: Any) -> None:
    """Children do not act on SIGINT, SIGTERM or SIGHUP (the job manager does), but a
    program their job starts gets the default back: its terminate() stops it."""
    programs = "tests.jobs_fixtures.programs"
    pool = pool_factory(job_modules=(SAMPLE, programs))
    child = up(pool)
    _, status, payload = run_one(pool, child, 1, body("stop_a_program", path=programs))
    assert (status, payload) == (JobStatus.OK, f'{{"value":{-signal.SIGTERM}}}')
