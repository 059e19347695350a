"""Which unserved queues the router warns about, and when (no sockets, time passed in)."""

from __future__ import annotations

from django_eventmq.router.routing import Routing
from django_eventmq.router.unserved import UnservedQueues
from tests.router.test_routing import DEFAULT, job


def test_a_queue_is_warned_about_after_the_grace_then_not_again_until_served() -> None:
    routing = Routing()
    routing.add_worker(b"w1", DEFAULT, 0.0)
    routing.submit(job("r1", "reports"), 0.0)
    routing.submit(job("r2", "reports"), 0.0)
    unserved = UnservedQueues(grace=10)
    assert routing.unserved() == {"reports": 2}
    assert unserved.check(routing, 0.0) == []
    assert unserved.check(routing, 9.9) == []  # a job manager may be reconnecting
    assert unserved.check(routing, 10.0) == [("reports", 2)]
    assert unserved.check(routing, 50.0) == []  # once
    # Served (even with nothing waiting for a while), then unserved again: warned again.
    routing.add_worker(b"w2", ((10, "reports"),), 60.0)
    routing.ready(b"w2", 60.0)
    routing.ready(b"w2", 60.0)
    assert routing.unserved() == {}
    assert unserved.check(routing, 60.0) == []
    routing.remove_worker(b"w2")
    routing.submit(job("r3", "reports"), 70.0)
    assert unserved.check(routing, 70.0) == []
    assert unserved.check(routing, 80.0) == [("reports", 1)]


def test_a_queue_served_within_the_grace_is_not_warned_about() -> None:
    routing = Routing()
    routing.submit(job("r1", "reports"), 0.0)
    unserved = UnservedQueues(grace=10)
    assert unserved.check(routing, 0.0) == []
    # Served (no free slot yet: the job still waits), then gone again before taking it:
    # the grace starts again when the queue is unserved again, not from the first look.
    routing.add_worker(b"w", ((10, "reports"),), 5.0)
    assert unserved.check(routing, 5.0) == []
    routing.remove_worker(b"w")
    assert unserved.check(routing, 12.0) == []
    assert unserved.check(routing, 21.9) == []
    assert unserved.check(routing, 22.0) == [("reports", 1)]
    # Served and drained within the grace: nothing to say.
    routing.add_worker(b"w", ((10, "reports"),), 30.0)
    routing.ready(b"w", 30.0)  # takes the job
    assert unserved.check(routing, 50.0) == []


def test_a_stopping_job_manager_serves_nothing() -> None:
    routing = Routing()
    routing.add_worker(b"w", ((10, "reports"),), 0.0)
    routing.stop_dispatching(b"w")
    routing.submit(job("r1", "reports"), 0.0)
    assert routing.served_queues() == set()
    assert routing.unserved() == {"reports": 1}
