"""Scheduled runs of a unique job carry its key (``schedule()`` and ``@job(schedule=)``),
so our router refuses a run while the previous one is held; the scheduler logs the
refusal once and goes on with the next runs."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from django_eventmq.client.jobs import Job
from django_eventmq.models import Schedule
from django_eventmq.protocol import Reject, new_msgid, parse_headers
from django_eventmq.protocol import Schedule as ScheduleMessage
from django_eventmq.protocol.unique import not_unique_reason
from django_eventmq.runtime.settings import Settings
from django_eventmq.schedule_database import sync_declared
from django_eventmq.scheduling.api import schedule
from django_eventmq.scheduling.scheduler import Scheduler
from django_eventmq.scheduling.timing import every
from tests.fake_router import FakeRouter
from tests.router.test_router import Harness
from tests.support import wait_for

from . import jobs
from .fakes import MemoryStore
from .test_scheduler_core import connect, settings_for

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


def unique_touch(**options: Any) -> Job[[str], str]:
    return Job(jobs.touch.func, queue="uq", **{"unique_for": 0, **options})


def test_runs_of_a_unique_job_are_refused_while_the_previous_one_is_held(
    start_router: Callable[..., Harness],
    eventmq_settings: Callable[..., Settings],
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = start_router()
    store = MemoryStore()
    scheduler = Scheduler(
        Settings(broker_addr=h.router.frontend_address, heartbeat_interval=0.2),
        store,
        poll_interval=0.05,
        grace=30,
    )
    try:
        wait_for(
            lambda: (scheduler.loop_once(timeout=0.01), scheduler.connected)[1], 5, "registered"
        )
        eventmq_settings(BROKER_ADDR=h.router.frontend_address)
        job = unique_touch()
        schedule(job, interval_secs=60, args=["/nonexistent/a"])

        def fire(now: datetime) -> int:
            scheduler.loop_once(now=now, timeout=0.01)
            return len(store.fired)

        wait_for(lambda: fire(datetime.now(UTC)) == 1, 5, "the first run")
        (first,) = store.fired
        key = job.unique_headers(None, ("/nonexistent/a",), {})
        assert key is not None and key.unique_key is not None
        wait_for(lambda: h.ask("MONITOR")["unique_keys"] == 1, 5, "the first run held")
        caplog.set_level(logging.INFO, logger="django_eventmq.scheduler")
        later = datetime.now(UTC) + timedelta(seconds=61)
        wait_for(lambda: fire(later) == 2, 5, "the second run")
        wait_for(lambda: fire(later) and "skipped" in caplog.text, 5, "the REJECT")
        skipped = [r for r in caplog.records if "skipped" in r.getMessage()]
        assert len(skipped) == 1 and skipped[0].levelno == logging.INFO
        assert first[2] in skipped[0].getMessage()  # names the run that holds the key
        assert h.ask("MONITOR")["unique_refused"] == 1
        # Not sent again: the scheduler goes on to the next run at its time.
        for _ in range(5):
            scheduler.loop_once(now=later, timeout=0.01)
        assert len(store.fired) == 2 and h.ask("MONITOR")["unique_refused"] == 1
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    finally:
        scheduler.close()


def test_schedule_of_a_unique_job_sends_its_key_and_a_plain_one_none(
    eventmq_settings: Callable[..., Settings],
) -> None:
    router = FakeRouter()
    try:
        eventmq_settings(BROKER_ADDR=router.addr)
        job = unique_touch(unique_key=lambda path: path)
        schedule(job, interval_secs=60, args=["/tmp/a"])
        schedule(jobs.touch, interval_secs=60, args=["/tmp/a"])
        router.wait_count(ScheduleMessage, 2)
        (_, unique), (_, plain) = router.of(ScheduleMessage)
        expected = job.unique_headers(None, ("/tmp/a",), {})
        assert expected is not None
        assert unique.headers.unique_key == expected.unique_key is not None
        assert plain.headers.unique_key is None
    finally:
        router.close()


@pytest.mark.django_db
def test_declared_schedules_of_a_unique_job_carry_its_key() -> None:
    job = unique_touch(unique_for=300)
    sync_declared([(job, every(60, args=["/tmp/x"]))], now=T0)
    headers = parse_headers(Schedule.objects.get(source="code").headers)
    expected = job.unique_headers(None, ("/tmp/x",), {})
    assert expected is not None and headers.unique_key == expected.unique_key
    assert headers.unique_for == 300


def test_another_refusal_of_a_run_is_a_warning(
    router: FakeRouter, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler = Scheduler(settings_for(router), MemoryStore(), poll_interval=0.05, grace=30)
    try:
        identity = connect(router, scheduler)
        caplog.set_level(logging.INFO, logger="django_eventmq.scheduler")
        router.send(identity, Reject(msgid=new_msgid(), job_msgid="run-1", reason="queue full"))
        router.send(
            identity,
            Reject(msgid=new_msgid(), job_msgid="run-2", reason=not_unique_reason("run-0", "x")),
        )

        def seen() -> list[logging.LogRecord] | None:
            scheduler.loop_once(now=T0, timeout=0.01)
            found = [r for r in caplog.records if "run-" in r.getMessage()]
            return found if len(found) == 2 else None

        records = wait_for(seen, 5, "both REJECTs")
        assert [(r.levelno, "run-1" in r.getMessage()) for r in records] == [
            (logging.WARNING, True),
            (logging.INFO, False),
        ]
        assert "queue full" in records[0].getMessage()
        assert "run-0" in records[1].getMessage() and scheduler.connected
    finally:
        scheduler.close()
