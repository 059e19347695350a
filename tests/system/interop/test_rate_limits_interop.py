"""OUR client -> OUR router with rate limits -> the REFERENCE job manager.

The ``rate-limit`` / ``rate-key`` headers are our extensions: the reference
job manager keeps them as unknown headers and runs the jobs; our router counts
them against the limit as for any job manager.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from django_eventmq.protocol import Headers
from tests.support import Proc, wait_for

from .conftest import (
    INTEROP,
    REFERENCE_DEADLINE,
    Router,
    our_router_with_reference_jobmanager,
    wait_records,
)
from .refjobs.record import record

pytestmark = INTEROP


@pytest.fixture(scope="module")
def stack(workdir: Path) -> Iterator[tuple[Router, Proc]]:
    # Per hour, not per second: the check counts the queue's jobs in the current
    # window, which a loaded machine can carry past a one-second boundary.
    with our_router_with_reference_jobmanager(
        workdir, {"EMQ_RATE_LIMITS": "default=100/h"}
    ) as stack:
        yield stack


def test_the_reference_jobmanager_runs_rate_limited_jobs(
    stack: tuple[Router, Proc], records_file: Path, use_broker: Callable[[str], None]
) -> None:
    router, _ = stack
    use_broker(router.frontend)
    limited = Headers(extra=("rate-limit:1/h", "rate-key:interop"))
    first = record.send((1,), {"out": str(records_file)}, headers=limited)
    record.send((2,), {"out": str(records_file)}, headers=limited)  # held back an hour
    record.send((3,), {"out": str(records_file)})  # not held up by it
    records = wait_records(records_file, 2, timeout=REFERENCE_DEADLINE)
    assert sorted(r["args"][0] for r in records) == [1, 3]
    assert first
    admin = router.admin()
    status = admin.call("STATUS")
    assert status["rate_limits_by_key"] == {"interop": {"limit": "1/h", "used": 1}}

    def held_back() -> bool:
        queues = router.admin().call("STATUS")["rate_limits_by_queue"]
        return bool(queues["default"]["held_back"] == 1 and queues["default"]["used"] == 2)

    wait_for(held_back, 10, what="one job held back, two counted on the queue")
