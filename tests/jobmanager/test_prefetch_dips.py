"""A prefetch that dips for a moment takes no slots back from the router.

The prefetch follows a moving average of measured run times, which under load
include the job manager's own turns: one slow measurement among short jobs
drops it for a few jobs. An UNREADY then, and a READY per slot when it rose
again, cost messages and left the router without slots to hand jobs out; the
job manager now tells a shrink only once it lasted ``SHRINK_AFTER`` (a lasting
one: tests/jobmanager/test_prefetch.py, the long jobs).
"""

from __future__ import annotations

from collections.abc import Callable

from django_eventmq.protocol import Done, Ready, Unready
from tests.fake_router import FakeRouter, body
from tests.jobmanager.test_prefetch import (  # the job manager on a clock the test moves
    Driven,
    driven,  # noqa: F401 - the fixture
    grow,
    our_handshake,
    router_holds,
    sent,
)


def test_one_slow_measurement_takes_no_slots_back(
    router: FakeRouter,
    driven: Callable[..., Driven],  # noqa: F811
) -> None:
    jm = driven(router, prefetch=6)  # concurrency 2: 8 slots once grown
    identity = our_handshake(router)
    grow(jm, router, identity)
    jm.until(router, lambda: router_holds(router, 2) == 8, "the prefetch announced")
    readies = router.count(Ready)
    # One job measured long (the clock moves while it runs): the prefetch drops to 0 ...
    router.request(identity, body("add", 1, 1))
    jm.until(router, lambda: bool(jm.jm.jobs), "the slow one taken")
    # It "runs" exactly one second by the job manager's clock, however many turns
    # it takes here (moving the clock each turn, a loaded machine measured 2 s).
    jm.now += 1.0
    jm.until(router, lambda: not jm.jm.jobs, "the slow one finished")
    jm.until(router, lambda: router.count(Done) == 3, "its DONE")  # the clock stands still
    assert jm.jm.prefetch.value == 0
    # ... and short jobs, within SHRINK_AFTER of it by the clock, raise it again.
    for i in range(12):
        router.request(identity, body("add", i, i))
    jm.until(router, lambda: router.count(Done) == 15, "twelve short jobs done")
    assert jm.jm.prefetch.value == 6
    assert sent(router, Unready) == []
    assert router.count(Ready) == readies  # nothing taken back, nothing to announce again
    assert router_holds(router, requests=15) == 8
