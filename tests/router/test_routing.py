"""Routing state without sockets: table-driven scenarios of INFORM/READY/REQUEST/REPLY."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from django_eventmq.router.routing import RoutedJob, Routing, Schedulers

DEFAULT = ((10, "default"),)
_seq = itertools.count(1)


def job(
    msgid: str, queue: str = "default", guarantee: bool = False, now: float = 0.0, priority: int = 0
) -> RoutedJob:
    frames = [b"", b"eMQP/1.0", b"REQUEST", msgid.encode()]
    return RoutedJob(msgid, queue, frames, guarantee, now, seq=next(_seq), priority=priority)


def run(routing: Routing, step: tuple[Any, ...], now: float) -> Any:
    """Apply one step; return what the table compares."""
    op, *args = step
    if op == "inform":
        name, queues = args
        routing.add_worker(name.encode(), tuple(queues), now)
        return None
    if op == "ready":
        got = routing.ready(args[0].encode(), now)
        return got.msgid if got else None
    if op == "submit":
        msgid, queue, *flags = args
        priority = next((int(f[1:]) for f in flags if f.startswith("p")), 0)
        worker = routing.submit(job(msgid, queue, "guarantee" in flags, now, priority), now)
        return worker.identity.decode() if worker else None
    if op == "reply":  # ("reply", worker, msgid)
        got = routing.reply(args[0].encode(), args[1])
        return got.msgid if got else None
    if op == "fail":  # what the router's Book does when a worker dies
        released = routing.remove_worker(args[0].encode())
        for released_job in released:
            routing.release(released_job)
            routing.waiting.push(released_job)
        return [j.msgid for j in released]
    if op == "kbai":  # a departing worker keeps its jobs until it reports them
        return [j.msgid for j in routing.remove_worker(args[0].encode())]
    if op == "waiting":
        return {q: [j.msgid for j in jobs] for q, jobs in routing.waiting.items()}
    if op == "inflight":
        return sorted(routing.inflight)
    if op == "slots":
        return routing.workers[args[0].encode()].slots
    raise AssertionError(f"unknown step {op}")


# Each scenario: a list of (step, expected result). Steps happen at now = 1, 2, 3, ...
SCENARIOS: dict[str, list[tuple[tuple[Any, ...], Any]]] = {
    "higher weight first, then waits": [
        (("inform", "A", [(10, "q")]), None),
        (("inform", "B", [(30, "q")]), None),
        (("ready", "A"), None),
        (("ready", "B"), None),
        (("submit", "m1", "q"), "B"),
        (("submit", "m2", "q"), "A"),
        (("submit", "m3", "q"), None),
        (("waiting",), {"q": ["m3"]}),
    ],
    "equal weights: least recently used": [
        (("inform", "A", DEFAULT), None),
        (("inform", "B", DEFAULT), None),
        (("ready", "A"), None),
        (("ready", "A"), None),
        (("ready", "B"), None),
        (("ready", "B"), None),
        (("submit", "m1", "default"), "A"),
        (("submit", "m2", "default"), "B"),
        (("submit", "m3", "default"), "A"),
        (("submit", "m4", "default"), "B"),
    ],
    "LRU is by last dispatch, not by when the slot came back": [
        (("inform", "A", DEFAULT), None),
        (("inform", "B", DEFAULT), None),
        (("ready", "A"), None),
        (("ready", "B"), None),
        (("submit", "m1", "default"), "A"),
        (("submit", "m2", "default"), "B"),
        (("ready", "B"), None),
        (("ready", "A"), None),
        (("submit", "m3", "default"), "A"),
        (("submit", "m4", "default"), "B"),
    ],
    "one REQUEST per READY; a READY takes the waiting one": [
        (("inform", "A", DEFAULT), None),
        (("ready", "A"), None),
        (("submit", "m1", "default"), "A"),
        (("submit", "m2", "default"), None),
        (("slots", "A"), 0),
        (("ready", "A"), "m2"),
        (("ready", "A"), None),
        (("slots", "A"), 1),
    ],
    "a REQUEST for an unserved queue waits for that queue": [
        (("inform", "A", DEFAULT), None),
        (("ready", "A"), None),
        (("submit", "m1", "email"), None),
        (("slots", "A"), 1),
        (("waiting",), {"email": ["m1"]}),
        (("inform", "B", [(10, "email")]), None),
        (("ready", "B"), "m1"),
        (("waiting",), {}),
    ],
    "READY looks at the worker's queues by weight, ties in listed order": [
        (("submit", "a1", "a"), None),
        (("submit", "b1", "b"), None),
        (("submit", "c1", "c"), None),
        (("inform", "W", [(10, "a"), (20, "c"), (10, "b")]), None),
        (("ready", "W"), "c1"),
        (("ready", "W"), "a1"),
        (("ready", "W"), "b1"),
    ],
    # A reference job manager's READY after a worker process of its died (the one
    # that replaced it) is no finished job: a READY finishes none, a REPLY names it.
    "a READY is a slot, never a finished job": [
        (("inform", "A", DEFAULT), None),
        (("ready", "A"), None),
        (("ready", "A"), None),
        (("submit", "m1", "default"), "A"),
        (("submit", "m2", "default"), "A"),
        (("inflight",), ["m1", "m2"]),
        (("ready", "A"), None),
        (("inflight",), ["m1", "m2"]),
        (("slots", "A"), 1),
    ],
    "a REPLY names the finished job, from the worker that holds it": [
        (("inform", "A", DEFAULT), None),
        (("inform", "B", DEFAULT), None),
        (("ready", "A"), None),
        (("ready", "A"), None),
        (("submit", "m1", "default"), "A"),
        (("submit", "m2", "default"), "A"),
        (("reply", "B", "m2"), None),  # not B's: a run that is over
        (("reply", "A", "m2"), "m2"),
        (("ready", "A"), None),
        (("inflight",), ["m1"]),
        (("reply", "A", "nope"), None),
    ],
    "a failed worker's jobs go back to the front, in their order": [
        (("inform", "A", DEFAULT), None),
        (("ready", "A"), None),
        (("ready", "A"), None),
        (("ready", "A"), None),
        (("submit", "g1", "default", "guarantee"), "A"),
        (("submit", "n1", "default"), "A"),
        (("submit", "g2", "default", "guarantee"), "A"),
        (("submit", "w1", "default"), None),
        (("fail", "A"), ["g1", "n1", "g2"]),
        (("waiting",), {"default": ["g1", "n1", "g2", "w1"]}),
        (("inflight",), []),
        (("inform", "B", DEFAULT), None),
        (("ready", "B"), "g1"),
    ],
    "KBAI: the worker is gone, its jobs stay handed out": [
        (("inform", "A", DEFAULT), None),
        (("ready", "A"), None),
        (("submit", "g1", "default", "guarantee"), "A"),
        (("kbai", "A"), ["g1"]),
        (("inflight",), ["g1"]),
        (("waiting",), {}),
        (("submit", "m2", "default"), None),
    ],
    "higher priority first within a queue, then oldest": [
        (("submit", "low", "q"), None),
        (("submit", "high", "q", "p5"), None),
        (("submit", "low2", "q"), None),
        (("submit", "neg", "q", "p-1"), None),
        (("submit", "high2", "q", "p5"), None),
        (("waiting",), {"q": ["high", "high2", "low", "low2", "neg"]}),
        (("inform", "A", [(10, "q")]), None),
        (("ready", "A"), "high"),
    ],
    "INFORM again resets the worker": [
        (("inform", "A", DEFAULT), None),
        (("ready", "A"), None),
        (("ready", "A"), None),
        (("inform", "A", [(10, "email")]), None),
        (("slots", "A"), 0),
        (("submit", "m1", "default"), None),
        (("ready", "A"), None),
        (("submit", "m2", "email"), "A"),
    ],
}


@pytest.mark.parametrize("steps", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_scenario(steps: list[tuple[tuple[Any, ...], Any]]) -> None:
    routing = Routing()
    for number, (step, expected) in enumerate(steps, start=1):
        assert run(routing, step, float(number)) == expected, f"step {number}: {step}"


def test_counts_and_queue_members() -> None:
    routing = Routing()
    routing.add_worker(b"A", ((10, "default"), (30, "email")), 0.0)
    routing.add_worker(b"B", ((50, "email"),), 0.0)
    assert routing.queue_members("email") == [(50, b"B"), (30, b"A")]
    routing.ready(b"A", 1.0)
    routing.submit(job("m1"), 2.0)
    routing.reply(b"A", "m1")
    routing.ready(b"A", 2.5)
    assert routing.submit(job("m2"), 3.0) is routing.workers[b"A"]
    assert [j.msgid for j in routing.remove_worker(b"A")] == ["m2"]
    assert routing.processed_by_queue == {"default": 1}
    assert routing.processed_by_worker == {b"A": 1}
    assert sorted(routing.queue_names()) == ["email"]


def test_undo_puts_the_job_back_first_and_keeps_the_slot() -> None:
    routing = Routing()
    routing.add_worker(b"A", DEFAULT, 0.0)
    routing.ready(b"A", 1.0)
    routing.submit(job("w0"), 1.5)  # dispatched
    routing.reply(b"A", "w0")
    routing.ready(b"A", 1.6)  # w0 finished: its slot back
    first = job("m1")
    assert routing.submit(first, 2.0) is not None
    routing.submit(job("m2"), 2.5)  # waits
    routing.undo(first)
    assert [j.msgid for j in routing.waiting["default"]] == ["m1", "m2"]
    assert routing.workers[b"A"].slots == 1
    pair = routing.dispatch_waiting("default", 3.0)
    assert pair is not None and pair[1] is first
    assert routing.dispatch_waiting("default", 3.0) is None  # no slot left
    assert routing.dispatch_waiting("nosuch", 3.0) is None


def test_expired() -> None:
    routing = Routing()
    routing.add_worker(b"A", DEFAULT, 0.0)
    routing.add_worker(b"B", DEFAULT, 0.0)
    routing.workers[b"B"].last_heard = 4.0  # what the backend does with each message
    assert routing.expired(5.5, 5.0) == [b"A"]


def test_duplicate_queue_names_keep_the_highest_weight() -> None:
    routing = Routing()
    routing.add_worker(b"A", ((10, "q"), (40, "q")), 0.0)
    assert routing.workers[b"A"].queues == ((40, "q"),)
    assert routing.remove_worker(b"A") == []
    assert list(routing.queue_names()) == []


def test_schedulers_round_robin() -> None:
    peers = Schedulers()
    assert peers.next() is None
    assert peers.add(b"s1", 0.0) is True
    assert peers.add(b"s2", 0.0) is True
    assert peers.add(b"s1", 1.0) is False  # INFORM again refreshes
    turns = [s.identity for s in (peers.next(), peers.next(), peers.next()) if s]
    assert turns == [b"s1", b"s2", b"s1"]
    assert peers.expired(5.5, 5.0) == [b"s2"]
    assert peers.remove(b"s2") is True
    assert peers.remove(b"s2") is False
    assert [peers.next(), peers.next()] == [peers.peers[b"s1"]] * 2


def test_a_ready_while_jobs_wait_takes_one_and_finishes_none() -> None:
    # A job manager connecting while jobs wait, or a reference one whose worker
    # process was replaced: each READY takes a job, none is taken as finished.
    routing = Routing()
    for name in ("m1", "m2", "m3"):
        routing.submit(job(name), 0.0)
    routing.add_worker(b"A", DEFAULT, 1.0)
    assert routing.ready(b"A", 1.00) is routing.inflight["m1"]
    assert routing.ready(b"A", 5.0) is routing.inflight["m2"]
    assert routing.ready(b"A", 9.0) is routing.inflight["m3"]
    assert sorted(routing.inflight) == ["m1", "m2", "m3"]


def test_a_window_of_waiting_jobs_in_memory_the_rest_loaded_in_order() -> None:
    on_disk: list[RoutedJob] = []

    def load(queue: str, after: tuple[int, int] | None, limit: int) -> list[RoutedJob]:
        ordered = sorted(on_disk, key=lambda j: j.key)
        return [j for j in ordered if after is None or j.key > after][:limit]

    routing = Routing(window=3, load=load)
    jobs = [job(f"m{i}", priority=i % 2) for i in range(10)]
    for queued in jobs:
        on_disk.append(queued)  # the journal stores every job first
        routing.waiting.push(queued)
    assert routing.waiting.memory() <= 6
    assert len(routing.waiting["default"]) == 10
    routing.add_worker(b"A", DEFAULT, 0.0)
    taken = []
    for step in range(10):
        got = routing.dispatch_waiting("default", float(step)) or routing.ready(b"A", 9.0)
        assert got is not None
        picked = got[1] if isinstance(got, tuple) else got
        on_disk.remove(picked)
        taken.append(picked.msgid)
        routing.reply(b"A", picked.msgid)
    assert taken == [j.msgid for j in sorted(jobs, key=lambda j: j.key)]
    assert "default" not in routing.waiting


def test_a_stopping_worker_gets_nothing_more_and_keeps_its_jobs() -> None:
    routing = Routing()
    routing.add_worker(b"A", DEFAULT, 0.0)
    routing.add_worker(b"B", DEFAULT, 0.0)
    for _ in range(3):
        routing.ready(b"A", 1.0)
    assert routing.submit(job("m1"), 2.0) is routing.workers[b"A"]
    assert routing.submit(job("m2"), 2.0) is routing.workers[b"A"]
    routing.stop_dispatching(b"A")
    a = routing.workers[b"A"]
    assert (a.slots, a.stopping, [j.msgid for j in a.inflight]) == (0, True, ["m1", "m2"])
    assert routing.submit(job("m3"), 3.0) is None  # its third slot is gone: m3 waits
    # A slot it frees (DONE, READY, a failed send) is not used either.
    finished, nxt = routing.done(b"A", "m1", 4.0)
    assert finished is not None and finished.msgid == "m1" and nxt is None
    assert routing.ready(b"A", 4.0) is None
    m2 = routing.inflight["m2"]
    routing.undo(m2)
    assert a.slots == 0 and sorted(j.msgid for j in routing.waiting["default"]) == ["m2", "m3"]
    # Another worker takes what waits; an INFORM again makes A a fresh worker.
    assert routing.ready(b"B", 5.0) is not None
    routing.add_worker(b"A", DEFAULT, 6.0)
    assert routing.ready(b"A", 6.0) is not None
