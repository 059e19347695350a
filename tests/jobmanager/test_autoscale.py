"""Autoscaling and warm restart in the pool, step by step with real worker processes
(the live tests, ``test_autoscale_live.py``, show them through a router)."""

from __future__ import annotations

from typing import Any

from django_eventmq.jobmanager.pool import Status
from django_eventmq.jobmanager.prefetch import Prefetch
from tests.fake_router import body
from tests.jobmanager.test_pool import collect, pool_factory, run_one, up_all, wait_up
from tests.support import wait_for

__all__ = ["pool_factory"]


def test_prefetch_follows_the_pool_size() -> None:
    prefetch = Prefetch(cap=8, budget=0.05, concurrency=2)
    prefetch.observe(0.05)  # 0.1 s of work for the pool: 2 jobs
    assert (prefetch.value, prefetch.depth) == (2, 2)
    prefetch.resize(4)
    assert (prefetch.value, prefetch.depth) == (4, 2)
    prefetch.resize(1)
    assert (prefetch.value, prefetch.depth) == (1, 2)
    fixed = Prefetch(cap=3, budget=0, concurrency=2)
    fixed.resize(5)
    assert (fixed.value, fixed.depth) == (3, 2)


def test_retire_idle_keeps_busy_children_and_the_minimum(pool_factory: Any) -> None:
    pool = pool_factory(concurrency=3, autoscale="1,3")
    assert pool.size == 1  # starts at MIN
    pool.resize(3)
    children = up_all(pool)
    assert len(children) == 3
    busy, idle_a, idle_b = children
    pool.send(busy, 1, "m1", body("echo", "x"))  # runs and ends; then a slow one
    results: list[tuple[int, str, str]] = []
    wait_for(lambda: collect(pool, busy, results) and results, 10, "first job")
    pool.send(busy, 2, "m2", body("slow", 5))
    now = max(c.idle_since for c in children) + 100
    # None idle long enough: nothing retired.
    assert pool.retire_idle(200, keep=1, now=now) == 0
    # All idle long enough but the busy one: both idle ones go, the busy one stays.
    assert pool.retire_idle(1, keep=1, now=now) == 2
    assert (busy.status, idle_a.status, idle_b.status) == (
        Status.UP,
        Status.RETIRING,
        Status.RETIRING,
    )
    assert pool.size == 1
    # Never below the minimum, even when the last one idles.
    assert pool.retire_idle(1, keep=1, now=now + 100) == 0


def test_with_no_child_up_children_start_one_at_a_time(pool_factory: Any) -> None:
    """Children starting together share the CPU and all come up late: while none is up
    (a start, a reload), one starts, and the rest once it is up."""
    pool = pool_factory(concurrency=3)
    (first,) = pool.respawn()
    assert pool.respawn() == []  # the first is still starting
    wait_up(pool, first)
    assert len(pool.respawn()) == 2
    old = pool.active()
    assert pool.renew() == old  # a reload: the same again for the new ones
    (new,) = pool.respawn()
    assert pool.respawn() == []
    wait_up(pool, new)
    assert len(pool.respawn()) == 2


def test_renew_replaces_every_child_and_the_old_ones_finish(pool_factory: Any) -> None:
    pool = pool_factory(concurrency=1)
    (old,) = pool.respawn()
    wait_up(pool, old)
    pool.send(old, 1, "m1", body("slow", 0.5))
    assert pool.renew() == [old]
    assert (old.status, old.renewed, pool.renewed_jobs()) == (Status.RETIRING, True, 1)
    (new,) = pool.respawn()
    wait_up(pool, new)
    assert pool.pick(10) is new  # new jobs go to the new child only
    assert run_one(pool, new, 2, body("add", 1, 2))[1] == "ok"
    results: list[tuple[int, str, str]] = []
    wait_for(lambda: collect(pool, old, results) and results, 10, "the old child's job")
    assert results[0][:2] == (1, "ok")
    assert pool.renewed_jobs() == 0

    def gone() -> bool:
        pool.check()
        pool.reap()
        return old not in pool.children.values()

    wait_for(gone, 10, "the old child reaped")
    assert old.retired and old.exitcode == 0
