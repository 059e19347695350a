"""Workflows on PostgreSQL (READ COMMITTED): two job managers run a wide chord's members
at once; each commits its row and counts the stage's rows, so the callback is sent by
whichever counts last (both, if both see every row: the router takes it once)."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pg_support import require_postgres
from tests.support import ROOT, migrated_env
from tests.system.e2e.workflow_stack import SETTINGS, WorkflowStack, lines

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkflowStack]:
    import psycopg

    dsn = require_postgres()
    name = "emq_wf_" + uuid.uuid4().hex[:12]
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    tmp = tmp_path_factory.mktemp("workflows-pg")
    made: WorkflowStack | None = None
    try:
        env = migrated_env(
            {
                "DJANGO_SETTINGS_MODULE": SETTINGS,
                "EMQ_WF_DB": str(tmp / "unused.sqlite3"),
                "EMQ_WF_PG_NAME": name,
                "PYTHONPATH": str(ROOT),
            }
        )
        made = WorkflowStack(env, tmp / "journal.sqlite3")
        made.start_jobmanager(concurrency=4)
        made.start_jobmanager(concurrency=4)
        yield made
    finally:
        if made is not None:
            made.stop()
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_wide_chords_callback_runs_once_with_every_value(
    stack: WorkflowStack, tmp_path: Path
) -> None:
    for attempt in range(3):
        log = tmp_path / f"ran-{attempt}"
        out = stack.client("run", "chord8", str(log), "-")
        assert out["result"] == sum(2 * i for i in range(8)), out
        ran = Counter(lines(log))
        assert ran[f"total {[2 * i for i in range(8)]}"] == 1, ran
        assert sum(ran.values()) == 9
        assert stack.workflow(out["id"])["status"] == "succeeded"


def test_a_chain_on_postgresql(stack: WorkflowStack, tmp_path: Path) -> None:
    log = tmp_path / "ran"
    out = stack.client("run", "chain3", str(log), "-")
    assert out["result"] == 12
    assert lines(log) == ["add 1 2", "double 3", "double 6"]
    assert [s["completions"] for s in stack.steps(out["id"])] == [1, 1, 1]
