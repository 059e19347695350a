"""A scheduler given several router groups serves the first (docs: one scheduler per
group, sharing the schedule store; clients send a schedule to its queue's group)."""

from __future__ import annotations

import logging

import pytest

from django_eventmq.protocol import Inform
from django_eventmq.runtime.settings import Settings
from django_eventmq.scheduling.scheduler import Scheduler
from tests.fake_router import FakeRouter
from tests.scheduling.fakes import MemoryStore
from tests.support import tcp_addr, wait_for


def test_a_scheduler_of_several_groups_informs_the_first_group_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, other = FakeRouter(), FakeRouter()
    spare = tcp_addr()  # the first group's standby: nothing listens there
    settings = Settings(
        broker_addr=f"{first.addr},{spare};{other.addr}",
        heartbeat_interval=0.2,
        heartbeat_timeout=0.6,
    )
    caplog.set_level(logging.INFO, "django_eventmq.scheduler")
    sched = Scheduler(settings, MemoryStore(), poll_interval=0.05)
    try:
        assert sched.addresses.addresses == (first.addr, spare)
        assert "names 2 router groups; this scheduler serves the first" in caplog.text

        def informed() -> bool:
            sched.loop_once(timeout=0)
            first.pump(0.01)
            other.pump(0)
            return bool(first.ack_informs())

        wait_for(informed, 5, "the INFORM at the first group")
        wait_for(lambda: (sched.loop_once(timeout=0.01), sched.connected)[1], 5, "the ACK")
        other.pump(0.05)
        assert not other.of(Inform)
    finally:
        sched.close()
        first.close()
        other.close()
