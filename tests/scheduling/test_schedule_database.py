"""The ORM store: identity, upsert/remove, race-free claims, recording runs, code sync."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import OperationalError, connection

from django_eventmq.client.jobs import Job
from django_eventmq.models import Schedule, ScheduleRun
from django_eventmq.protocol import EMPTY_HEADERS, JobBody, Request, parse_headers
from django_eventmq.runtime.settings import Settings
from django_eventmq.schedule_database import DjangoScheduleDatabase, sync_declared
from django_eventmq.scheduling.identity import ScheduleSpec, job_identity
from django_eventmq.scheduling.scheduler import Scheduler
from django_eventmq.scheduling.timing import DuePlan, Timing, crontab, every
from tests.fake_router import FakeRouter
from tests.support import wait_for

from . import jobs
from .factories import ScheduleFactory, ScheduleRunFactory

pytestmark = pytest.mark.django_db
T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
BODY = JobBody(path="tests.scheduling.jobs", callable="touch", args=("/tmp/a",))


def spec(timing: Timing | None, **extra: object) -> ScheduleSpec:
    return ScheduleSpec(body=BODY, queue="default", headers=EMPTY_HEADERS, timing=timing, **extra)  # type: ignore[arg-type]


def test_same_job_and_timing_updates_its_row_and_other_timing_adds_one() -> None:
    store = DjangoScheduleDatabase()
    first = store.upsert(spec(Timing(interval=60)), T0)
    again = store.upsert(
        ScheduleSpec(
            body=BODY, queue="email", headers=parse_headers("timeout:9"), timing=Timing(interval=60)
        ),
        T0 + timedelta(minutes=5),
    )
    assert first is not None and again is not None and first.id == again.id
    row = Schedule.objects.get()
    assert (row.queue, row.headers, row.source) == ("email", "timeout:9", "api")
    assert row.next_run == T0, "scheduling again must not move (or repeat) the next run"
    store.upsert(spec(Timing(cron="0 9 * * *"), nohaste=True), T0)
    assert Schedule.objects.count() == 2
    assert {r.job_key for r in Schedule.objects.all()} == {job_identity(BODY)}


def test_job_identity_matches_the_reference_hash() -> None:
    # sha1 of json.dumps({args, kwargs, class_args, class_kwargs, path, callable}, sort_keys=True)
    import hashlib
    import json

    text = json.dumps(
        {
            "args": ["/tmp/a"],
            "kwargs": {},
            "class_args": [],
            "class_kwargs": {},
            "path": "tests.scheduling.jobs",
            "callable": "touch",
        },
        sort_keys=True,
    )
    assert job_identity(BODY) == hashlib.sha1(text.encode()).hexdigest()


def test_unschedule_with_and_without_timing() -> None:
    store = DjangoScheduleDatabase()
    store.upsert(spec(Timing(interval=60)), T0)
    store.upsert(spec(Timing(interval=120)), T0)
    store.upsert(spec(Timing(cron="0 9 * * *")), T0)
    assert store.remove(spec(Timing(interval=120))) == 1
    assert Schedule.objects.count() == 2
    assert store.remove(spec(None)) == 2
    assert not Schedule.objects.exists()


def test_claim_is_granted_once() -> None:
    row = ScheduleFactory()
    store = DjangoScheduleDatabase()
    assert store.claim(row.pk, T0, "m1", "a")
    assert not store.claim(row.pk, T0, "m2", "b")
    assert store.claim(row.pk, T0 + timedelta(seconds=1), "m3", "b")
    assert ScheduleRun.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_concurrent_claims_from_threads_grant_one() -> None:
    row = ScheduleFactory()
    results: list[object] = []
    barrier = threading.Barrier(4)

    def worker(n: int) -> None:
        barrier.wait()
        try:
            results.append(DjangoScheduleDatabase().claim(row.pk, T0, f"m{n}", str(n)))
        except OperationalError:  # SQLite: "table is locked"; the scheduler retries later
            results.append("busy")
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 1, results
    assert ScheduleRun.objects.count() == 1


def test_record_fire_counts_runs_and_finishes_run_count() -> None:
    row = ScheduleFactory(run_count=2, nohaste=False)
    assert row.runs_left == 2
    store = DjangoScheduleDatabase()
    (state,) = store.load([row.pk])
    store.record_fire(state, [(T0, "m1")], DuePlan((T0,), T0 + timedelta(minutes=1), 1), T0)
    row.refresh_from_db()
    assert (row.total_runs, row.runs_left, row.last_msgid, row.last_run) == (1, 1, "m1", T0)
    (state,) = store.load([row.pk])
    store.record_fire(state, [(T0 + timedelta(minutes=1), "m2")], DuePlan((), None, 0), T0)
    row.refresh_from_db()
    assert (row.total_runs, row.runs_left, row.enabled, row.next_run) == (2, 0, False, None)
    assert store.versions() == {}


def test_record_fire_keeps_an_edit_made_meanwhile() -> None:
    row = ScheduleFactory(interval=60)
    store = DjangoScheduleDatabase()
    (state,) = store.load([row.pk])
    row.interval = 5  # an admin edit lands between load and record
    row.save()
    edited_next = Schedule.objects.get(pk=row.pk).next_run
    store.record_fire(state, [(T0, "m1")], DuePlan((T0,), T0 + timedelta(hours=9), None), T0)
    row.refresh_from_db()
    assert row.next_run == edited_next and row.total_runs == 1


def test_versions_change_on_every_save_and_hide_disabled() -> None:
    row = ScheduleFactory()
    store = DjangoScheduleDatabase()
    before = store.versions()[row.pk]
    row.queue = "other"
    row.save()
    assert store.versions()[row.pk] == before + 1
    row.enabled = False
    row.save()
    assert row.pk not in store.versions()


def test_sync_declared_creates_keeps_and_removes_code_schedules() -> None:
    job = Job(jobs.touch.func, queue="email")
    declared = [
        (job, every(60, args=["/tmp/x"])),
        (job, crontab("30 2 * * *", timezone="Europe/Berlin", args=["/tmp/y"])),
    ]
    assert sync_declared(declared, now=T0) == (2, 0)
    rows = Schedule.objects.filter(source="code")
    assert {(r.interval, r.cron, r.timezone, r.queue) for r in rows} == {
        (60, "", "UTC", "email"),
        (None, "30 2 * * *", "Europe/Berlin", "email"),
    }
    Schedule.objects.filter(interval=60).update(enabled=False)  # the admin switched one off
    assert sync_declared(declared[:1], now=T0) == (1, 1)
    assert Schedule.objects.get(source="code").enabled is False


def test_prune_forgets_old_claims() -> None:
    old = ScheduleRunFactory(fire_time=T0 - timedelta(days=30))
    ScheduleRunFactory(schedule=old.schedule, fire_time=T0)
    assert DjangoScheduleDatabase().prune(T0 - timedelta(days=7)) == 1


def test_scheduler_restart_resumes_from_the_table(router: FakeRouter) -> None:
    """A new scheduler on the same table fires a run missed during downtime once."""
    row = ScheduleFactory(interval=60, nohaste=False)
    Schedule.objects.filter(pk=row.pk).update(next_run=T0)
    settings = Settings(broker_addr=router.addr)
    for attempt, now in enumerate((T0, T0 + timedelta(minutes=10, seconds=30))):
        sched = Scheduler(settings, DjangoScheduleDatabase(), poll_interval=0.0)
        try:

            def tick(sched: Scheduler = sched, now: datetime = now) -> bool:
                sched.loop_once(now=now, timeout=0.01)
                router.pump(0)
                router.ack_informs()
                return sched.connected

            wait_for(tick, 5, "scheduler connected")
            sched.loop_once(now=now, timeout=0)
            router.wait_for(Request, attempt + 1)
        finally:
            sched.close()
    row.refresh_from_db()
    assert row.total_runs == 2
    assert list(row.runs.order_by("fire_time").values_list("fire_time", flat=True)) == [
        T0,
        T0 + timedelta(minutes=10),
    ]
    assert row.next_run == T0 + timedelta(minutes=11)
