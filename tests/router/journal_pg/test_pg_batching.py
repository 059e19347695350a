"""The PostgreSQL journal's kept writes (COPY, UPDATE from arrays, DELETE by array)
give the same rows as writing each change at once: the model of
tests/router/test_journal_batching.py, against a real server."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_eventmq.router.journal.postgres import PostgresJournal
from django_eventmq.router.journal.schema import DELAYED, LEASED, WAITING
from tests.router.test_journal_batching import _COLUMNS, Model, _ops, apply

pytestmark = pytest.mark.postgres


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    adds=st.lists(
        st.tuples(st.sampled_from([WAITING, LEASED, DELAYED]), st.floats(0, 1e6)),
        min_size=1,
        max_size=12,
    ),
    ops=st.lists(_ops, max_size=40),
    spread=st.randoms(use_true_random=False),
)
def test_kept_writes_give_the_same_rows_as_writing_each_change_at_once(
    pg_dsn: str,
    pg_group: str,
    other: psycopg.Connection[Any],
    adds: list[tuple[int, float]],
    ops: list[tuple[Any, ...]],
    spread: Any,
) -> None:
    script: list[tuple[Any, ...]] = list(ops)
    for seq, (state, due) in enumerate(adds, start=1):
        script.insert(spread.randint(0, len(script)), ("add", seq, state, due))
    model = Model()
    journal = PostgresJournal(pg_dsn, group=pg_group)
    try:
        for op in script:
            apply(journal, op)  # type: ignore[arg-type]
            model.apply(op)
        journal.commit()
        rows = other.execute(f"SELECT {_COLUMNS} FROM jobs ORDER BY seq").fetchall()
        # msgid, queue and reason are stored as UTF-8 (pg_schema's module doc).
        text = [(r[0], r[1].decode(), r[2].decode(), *r[3:8], r[8].decode()) for r in rows]
        assert text == model.rows()
    finally:
        journal.close()
        other.execute("TRUNCATE jobs")
