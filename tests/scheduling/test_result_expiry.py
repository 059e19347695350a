"""Results that expire by themselves (``RESULT_EXPIRES``): a running scheduler
deletes finished results and workflows older than the setting, in batches,
and keeps newer and unfinished ones.

The process test runs ``manage.py emq_scheduler`` on a throwaway PostgreSQL
database; the batching and the sweep's timing are driven step by step on a
fake store.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from django_eventmq.errors import ConfigurationError
from django_eventmq.protocol import Heartbeat
from django_eventmq.runtime.settings import Settings, from_mapping
from django_eventmq.scheduling.expiry import ResultExpiry, sweep_every
from django_eventmq.scheduling.scheduler import Scheduler
from tests.fake_router import FakeRouter
from tests.support import ROOT, wait_for

from .conftest import PgDatabase
from .fakes import MemoryStore
from .test_processes import serve, start_scheduler

FINISHED = ("succeeded", "failed", "timed_out", "cancelled", "expired")
UNFINISHED = ("queued", "running", "retrying")


def add_results(db: PgDatabase, prefix: str, statuses: tuple[str, ...], age: str, n: int) -> None:
    """``n`` rows of each status, last written ``age`` ago (a PostgreSQL interval)."""
    db.query(
        """
        INSERT INTO django_eventmq_jobresult (msgid, queue, job, args, kwargs, status,
            exc_type, exc_message, traceback, attempts, jobmanager, workers, created, updated)
        SELECT %s || s || '-' || i, 'default', 'app.jobs.j', '[]', '{}', s, '', '', '', 1, '',
            '[]', now() - %s::interval, now() - %s::interval
        FROM unnest(%s::text[]) AS s, generate_series(1, %s) AS i
        """,
        prefix,
        age,
        age,
        list(statuses),
        n,
    )


def add_workflow(db: PgDatabase, workflow_id: str, status: str, age: str) -> None:
    db.query(
        """
        INSERT INTO django_eventmq_workflow (workflow_id, kind, status, stages, stage,
            failed_msgid, exc_type, exc_message, created, updated)
        VALUES (%s, 'chain', %s, '[]', 0, '', '', '', now() - %s::interval,
            now() - %s::interval)
        """,
        workflow_id,
        status,
        age,
        age,
    )
    db.query(
        """
        INSERT INTO django_eventmq_workflowstep (workflow_id, stage, member, msgid, job,
            completions, finished)
        SELECT id, 0, 0, workflow_id || '-0', 'app.jobs.j', 1, updated
        FROM django_eventmq_workflow WHERE workflow_id = %s
        """,
        workflow_id,
    )


def count(db: PgDatabase, table: str, where: str = "true") -> int:
    return int(db.query(f"SELECT count(*) FROM django_eventmq_{table} WHERE {where}")[0][0])


@pytest.fixture
def results_db(pg_database: PgDatabase) -> Iterator[PgDatabase]:
    for table in ("jobresult", "workflowstep", "workflow"):
        pg_database.query(f"DELETE FROM django_eventmq_{table}")
    yield pg_database
    for table in ("jobresult", "workflowstep", "workflow"):
        pg_database.query(f"DELETE FROM django_eventmq_{table}")


@pytest.mark.postgres
def test_a_running_scheduler_removes_finished_results_older_than_result_expires(
    results_db: PgDatabase, router: FakeRouter
) -> None:
    db = results_db
    # 2,500 old finished rows: three batches of at most 1,000.
    add_results(db, "old-", FINISHED, "2 hours", 500)
    add_results(db, "old-open-", UNFINISHED, "2 hours", 2)
    add_results(db, "new-", FINISHED, "10 minutes", 2)
    add_workflow(db, "wf-old-done", "succeeded", "2 hours")
    add_workflow(db, "wf-old-running", "running", "2 hours")
    add_workflow(db, "wf-new-done", "failed", "10 minutes")
    proc = start_scheduler(db, router.addr, env={"EMQ_RESULT_EXPIRES": "3600"})
    try:
        wait_for(
            lambda: (
                count(db, "jobresult", "msgid LIKE 'old-%%' AND msgid NOT LIKE 'old-open-%%'") == 0
            ),
            60,
            "old finished results gone",
        )
        proc.wait_output(r"removed (\d+) finished results and workflows", 30)
    finally:
        proc.stop()
    # Unfinished rows stay however old; newer finished ones stay.
    assert count(db, "jobresult", "msgid LIKE 'old-open-%%'") == 2 * len(UNFINISHED)
    assert count(db, "jobresult", "msgid LIKE 'new-%%'") == 2 * len(FINISHED)
    assert count(db, "jobresult") == 2 * len(UNFINISHED) + 2 * len(FINISHED)
    # A finished workflow goes with its steps; a running one and a newer one stay.
    left = {row[0] for row in db.query("SELECT workflow_id FROM django_eventmq_workflow")}
    assert left == {"wf-old-running", "wf-new-done"}
    assert count(db, "workflowstep") == 2
    # One line for the sweep, with every row it removed across its batches.
    removed = [int(n) for n in re.findall(r"removed (\d+) finished", proc.output())]
    assert removed == [2500 + 1]


@pytest.mark.postgres
def test_result_expires_0_keeps_every_result(results_db: PgDatabase, router: FakeRouter) -> None:
    db = results_db
    add_results(db, "old-", FINISHED, "3 days", 1)
    proc = start_scheduler(db, router.addr, env={"EMQ_RESULT_EXPIRES": "0"})
    try:
        # Turns after its first (where a sweep would be): heartbeats to the router.
        def beats() -> bool:
            serve(router)
            return len(router.of(Heartbeat)) >= 2

        wait_for(beats, 30, "two heartbeats from the scheduler")
    finally:
        proc.stop()
    assert count(db, "jobresult") == len(FINISHED)
    assert "removed" not in proc.output()


def test_a_bad_result_expires_is_refused_saying_what_it_takes() -> None:
    with pytest.raises(ConfigurationError, match=r"RESULT_EXPIRES: expected seconds.*got '1d'"):
        from_mapping({"RESULT_EXPIRES": "1d"})
    with pytest.raises(ConfigurationError, match=r"RESULT_EXPIRES: .*0 or None.*got -5"):
        from_mapping({"RESULT_EXPIRES": -5})
    assert Settings().result_expires == 86400
    assert from_mapping({"RESULT_EXPIRES": None}).result_expires == 0
    assert from_mapping({"RESULT_EXPIRES": timedelta(hours=2)}).result_expires == 7200
    assert from_mapping({}, environ={"EMQ_RESULT_EXPIRES": "600"}).result_expires == 600
    # The scheduler command says so and stops, before touching anything.
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "emq_scheduler"],
        cwd=ROOT,
        env={**os.environ, "EMQ_RESULT_EXPIRES": "1d"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "RESULT_EXPIRES: expected seconds" in done.stderr


def test_a_full_batch_is_followed_by_the_next_one_at_the_next_turn() -> None:
    calls: list[tuple[datetime, int]] = []
    backlog = [2500]

    def expire(before: datetime, batch: int) -> int:
        calls.append((before, batch))
        gone = min(batch, backlog[0])
        backlog[0] -= gone
        return gone

    expiry = ResultExpiry(3600.0)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    for mono in (10.0, 10.0, 10.0):
        expiry.turn(mono, now, expire)
    assert [batch for _, batch in calls] == [1000, 1000, 1000]
    assert backlog == [0]
    assert all(before == now - timedelta(hours=1) for before, _ in calls)
    # A short batch ends the sweep: the next one after the interval.
    expiry.turn(10.0 + sweep_every(3600) - 1, now, expire)
    assert len(calls) == 3
    assert expiry.wait(10.0) == sweep_every(3600) == 300
    expiry.turn(10.0 + sweep_every(3600), now, expire)
    assert len(calls) == 4
    # A tenth of RESULT_EXPIRES, between 1 s and 5 minutes.
    assert (sweep_every(5), sweep_every(600), sweep_every(86400)) == (1, 60, 300)


def test_the_scheduler_sweeps_at_its_first_turn_and_not_when_turned_off() -> None:
    class Store(MemoryStore):
        def __init__(self) -> None:
            super().__init__()
            self.expired: list[datetime] = []

        def expire_results(self, before: datetime, batch: int) -> int:
            self.expired.append(before)
            return 0

    now = datetime(2026, 1, 1, tzinfo=UTC)
    for expires, sweeps in ((60.0, 1), (0.0, 0)):
        store = Store()
        scheduler = Scheduler(
            from_mapping({"RESULT_EXPIRES": expires, "BROKER_ADDR": "tcp://127.0.0.1:1"}), store
        )
        try:
            scheduler.loop_once(now=now, timeout=0)
            scheduler.loop_once(now=now, timeout=0)
        finally:
            scheduler.close()
        assert store.expired == [now - timedelta(seconds=expires)] * sweeps
