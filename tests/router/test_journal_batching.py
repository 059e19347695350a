"""The journal's kept writes: applied grouped at the next read or commit, with the same
result as writing each change at once."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_eventmq.router.journal.commit import inserts, seq_spans
from django_eventmq.router.journal.schema import INSERT_CHUNK, INSERT_JOB, INSERT_JOBS
from django_eventmq.router.journal.store import DELAYED, LEASED, POISONED, WAITING, Journal
from tests.router.test_journal import add, row

_COLUMNS = "seq, msgid, queue, nprio, state, due, deaths, attempts, reason"


class Model:
    """Each change written at once, the plain way, to compare the journal with."""

    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:", isolation_level=None)
        self.db.execute(
            "CREATE TABLE jobs (seq INTEGER PRIMARY KEY, msgid TEXT UNIQUE, queue TEXT,"
            " nprio INTEGER, state INTEGER, due REAL, deaths INTEGER DEFAULT 0,"
            " attempts INTEGER DEFAULT 0, reason TEXT DEFAULT '')"
        )

    def apply(self, op: tuple[Any, ...]) -> None:
        kind, seq, *args = op
        run = self.db.execute
        if kind == "add":
            run(
                "INSERT INTO jobs (seq, msgid, queue, nprio, state, due) VALUES (?, ?, ?, 0, ?, ?)",
                (seq, f"m{seq}", "default", args[0], args[1]),
            )
        elif kind == "set_state":
            run("UPDATE jobs SET state = ? WHERE seq = ?", (args[0], seq))
        elif kind == "requeue":
            run("UPDATE jobs SET state = 0, deaths = ? WHERE seq = ?", (args[0], seq))
        elif kind == "delay":
            run(
                "UPDATE jobs SET state = 3, due = ?, attempts = ? WHERE seq = ?",
                (args[0], args[1], seq),
            )
        elif kind == "poison":
            run(
                "UPDATE jobs SET state = 2, deaths = ?, reason = ? WHERE seq = ?",
                (args[0], args[1], seq),
            )
        elif kind == "delete":
            run("DELETE FROM jobs WHERE seq = ?", (seq,))

    def rows(self) -> list[tuple[Any, ...]]:
        return self.db.execute(f"SELECT {_COLUMNS} FROM jobs ORDER BY seq").fetchall()


def apply(journal: Journal, op: tuple[Any, ...]) -> None:
    kind, seq, *args = op
    if kind == "add":
        assert add(journal, seq, state=args[0], due=args[1]) is True
    elif kind == "set_state":
        journal.set_state(seq, args[0])
    elif kind == "requeue":
        journal.requeue(seq, args[0])
    elif kind == "delay":
        journal.delay(seq, args[0], args[1])
    elif kind == "poison":
        journal.poison(seq, args[0], args[1])
    elif kind == "delete":
        journal.delete(seq)
    elif kind == "commit":
        journal.commit()
    elif kind == "read":
        journal.waiting("default", None, 1000)


def journal_rows(journal: Journal) -> list[tuple[Any, ...]]:
    journal.commit()
    return journal.db.execute(f"SELECT {_COLUMNS} FROM jobs ORDER BY seq").fetchall()


_seqs = st.integers(min_value=1, max_value=12)
_ops = st.one_of(
    st.tuples(st.just("set_state"), _seqs, st.sampled_from([WAITING, LEASED])),
    st.tuples(st.just("requeue"), _seqs, st.integers(0, 5)),
    st.tuples(st.just("delay"), _seqs, st.floats(0, 1e6), st.integers(0, 5)),
    st.tuples(st.just("poison"), _seqs, st.integers(0, 5), st.text(max_size=5)),
    st.tuples(st.just("delete"), _seqs),
    st.tuples(st.just("commit"), st.just(0)),
    st.tuples(st.just("read"), st.just(0)),
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
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
    tmp_path: Path, adds: list[tuple[int, float]], ops: list[tuple[Any, ...]], spread: Any
) -> None:
    # Adds mixed in among the other changes: a change may come before its row exists.
    script: list[tuple[Any, ...]] = list(ops)
    for seq, (state, due) in enumerate(adds, start=1):
        script.insert(spread.randint(0, len(script)), ("add", seq, state, due))
    model = Model()
    path = tmp_path / f"j-{uuid.uuid4().hex}.sqlite3"  # tmp_path is shared by the examples
    journal = Journal(str(path))
    try:
        for op in script:
            apply(journal, op)
            model.apply(op)
        assert journal_rows(journal) == model.rows()
    finally:
        journal.close()


def test_a_job_added_and_finished_within_one_commit_never_reaches_the_disk(
    tmp_path: Path,
) -> None:
    journal = Journal(str(tmp_path / "j.sqlite3"))
    try:
        add(journal, 1)
        journal.set_state(1, LEASED)
        journal.delete(1)
        before = journal.db.total_changes
        assert journal.commit() is True
        assert journal.db.total_changes == before  # no INSERT, UPDATE or DELETE ran
        assert journal.counts()[WAITING] == {}
    finally:
        journal.close()


def test_changes_to_one_row_are_merged_into_one_write(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path / "j.sqlite3"))
    try:
        add(journal, 1)
        journal.commit()
        before = journal.db.total_changes
        journal.set_state(1, LEASED)
        journal.requeue(1, deaths=1)
        journal.poison(1, deaths=2, reason="died twice")
        journal.commit()
        assert journal.db.total_changes - before == 1
        found = journal.find("m1")
        assert found is not None and found[0] == POISONED and found[1].deaths == 2
    finally:
        journal.close()


def test_an_add_that_may_meet_a_stored_msgid_inserts_at_once_and_finds_it(
    tmp_path: Path,
) -> None:
    journal = Journal(str(tmp_path / "j.sqlite3"))
    try:
        add(journal, 1)
        assert add(journal, 2, msgid="m1") is False  # the same msgid, kept: refused
        journal.commit()
        assert add(journal, 3, msgid="m1", on_disk=True) is False  # found by the insert
        assert add(journal, 4, on_disk=True) is True
        before = journal.db.total_changes
        journal.commit()
        assert journal.db.total_changes == before  # it was written already
        assert [r.seq for r in journal.waiting("default", None, 10)] == [1, 4]
    finally:
        journal.close()


def test_reads_see_writes_that_are_still_kept(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path / "j.sqlite3"))
    try:
        add(journal, 1)
        add(journal, 2, state=DELAYED, due=50.0)
        journal.set_state(1, LEASED)
        assert journal.waiting("default", None, 10) == []
        assert journal.next_due() == 50.0
        assert [r.msgid for r in journal.take_due(60.0)] == ["m2"]
        assert [r.msgid for r in journal.waiting("default", None, 10)] == ["m2"]
        assert journal.max_seq() == 2
    finally:
        journal.close()


def test_a_grouped_insert_counts_each_row_as_a_change(tmp_path: Path) -> None:
    # The router's group commit is bounded by changes (COMMIT_GROUP_MAX), not calls.
    journal = Journal(str(tmp_path / "j.sqlite3"))
    try:
        rows = [row(seq, msgid=f"m{seq}") for seq in (1, 2, 3)]
        assert journal.add_many(rows) == {1, 2, 3}
        assert journal.pending == 3
        assert journal.add_many([row(4, msgid="m1")]) == set()
    finally:
        journal.close()


def test_finished_seqs_go_as_range_deletes_and_lone_ones_alone() -> None:
    assert seq_spans([]) == ([], [])
    assert seq_spans({7}) == ([], [(7,)])
    assert seq_spans({5, 3, 4, 9, 1, 11, 12}) == ([(3, 5), (11, 12)], [(1,), (9,)])
    assert seq_spans(range(100, 1100)) == ([(100, 1099)], [])


@given(st.sets(st.integers(min_value=1, max_value=60)))
def test_the_spans_and_lone_seqs_name_every_seq_once(seqs: set[int]) -> None:
    spans, lone = seq_spans(seqs)
    named = [seq for first, last in spans for seq in range(first, last + 1)]
    named += [seq for (seq,) in lone]
    assert sorted(named) == sorted(seqs)
    assert all(last > first for first, last in spans)


def test_new_rows_go_in_chunks_then_one_a_statement() -> None:
    def rows(n: int) -> list[list[Any]]:
        return [[seq] for seq in range(n)]

    assert inserts([]) == []
    assert inserts(rows(3)) == [(INSERT_JOB, rows(3))]
    chunked = inserts(rows(2 * INSERT_CHUNK + 5))
    assert [sql for sql, _params in chunked] == [INSERT_JOBS, INSERT_JOB]
    flat = list(range(2 * INSERT_CHUNK))
    assert chunked[0][1] == [flat[:INSERT_CHUNK], flat[INSERT_CHUNK:]]
    assert chunked[1][1] == [[seq] for seq in range(2 * INSERT_CHUNK, 2 * INSERT_CHUNK + 5)]
    assert inserts(rows(INSERT_CHUNK)) == [(INSERT_JOBS, [list(range(INSERT_CHUNK))])]


def test_many_kept_jobs_are_stored_by_chunks_whole_and_in_order(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path / "j.sqlite3"))
    try:
        total = 3 * INSERT_CHUNK + 7
        for seq in range(1, total + 1):
            assert add(journal, seq) is True
        journal.commit()
        stored = [row.seq for row in journal.waiting("default", None, 10 * total)]
        assert stored == list(range(1, total + 1))
        assert journal.db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == total
    finally:
        journal.close()
