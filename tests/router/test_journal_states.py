"""The journal's job states are named (JobState) in its code; the numbers on disk stay.

Every statement that names a state is built from :class:`JobState` once, at
import: no module of the journal writes a bare state number in SQL, the
numbers of existing journal files keep their meaning, and each query still
names the constant of the partial index it is meant to use.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from django_eventmq.router.journal import store
from django_eventmq.router.journal.schema import SCHEMA, JobState
from django_eventmq.router.journal.store import Journal, new_row

JOURNAL_PACKAGE = Path(store.__file__).resolve().parent

#: A state compared with, set to or listed as a number: ``state = 0``,
#: ``state <> 2``, ``state IN (0, 3)``, ``SET state = 1`` ...
BARE_STATE = re.compile(r"\bstate\s*(?:=|==|<>|!=|<=|>=|<|>|(?:NOT\s+)?IN\s*\(?)\s*\d", re.I)


def bare_states(source: str) -> list[str]:
    return [match.group(0) for match in BARE_STATE.finditer(source)]


def test_the_pattern_finds_what_it_is_meant_to_find() -> None:
    # The check below can fail: these are the forms the journal used to write.
    sql = "WHERE state = 0; SET state=1 WHERE state IN (2, 3); WHERE state NOT IN (0)"
    assert bare_states(sql) == ["state = 0", "state=1", "state IN (2", "state NOT IN (0"]
    assert bare_states("WHERE state = {WAITING.sql} AND queue = ?") == []


def test_no_module_of_the_journal_names_a_state_by_its_number() -> None:
    modules = sorted(JOURNAL_PACKAGE.glob("*.py"))
    assert {path.name for path in modules} >= {"schema.py", "store.py", "parcels.py"}
    found = {path.name: bare_states(path.read_text(encoding="utf-8")) for path in modules}
    assert {name: hits for name, hits in found.items() if hits} == {}


def test_the_numbers_on_disk_keep_their_meaning() -> None:
    # Journal files written by any version hold these numbers in jobs.state.
    assert {state.name: state.value for state in JobState} == {
        "WAITING": 0,
        "LEASED": 1,
        "POISONED": 2,
        "DELAYED": 3,
    }


def test_the_partial_indexes_are_built_from_the_states() -> None:
    indexes = dict(re.findall(r"INDEX IF NOT EXISTS (\w+) ON jobs \([^)]*\) WHERE (.+);", SCHEMA))
    assert indexes == {
        "jobs_waiting": f"state = {JobState.WAITING.value}",
        "jobs_delayed": f"state = {JobState.DELAYED.value}",
        "jobs_poisoned": f"state = {JobState.POISONED.value}",
    }


@pytest.mark.parametrize(
    ("sql", "params", "index"),
    [
        (store._WAITING_FIRST, ("default", 10), "jobs_waiting"),
        (store._WAITING_AFTER, ("default", 0, 0, 10), "jobs_waiting"),
        (store._DUE, (100.0, 10), "jobs_delayed"),
        (store._NEXT_DUE, (), "jobs_delayed"),
        (store._POISONED, (10,), "jobs_poisoned"),
    ],
)
def test_each_state_query_uses_its_partial_index(
    tmp_path: Path, sql: str, params: tuple[object, ...], index: str
) -> None:
    journal = Journal(str(tmp_path / "journal.sqlite3"))
    try:
        plan = " ".join(
            str(row[-1]) for row in journal.db.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        )
    finally:
        journal.close()
    assert f"INDEX {index}" in plan, plan


def _journal_with_a_state_of_another_version(tmp_path: Path) -> Journal:
    """A journal with one row per known state and one in state 9: what a newer
    release (or a hand edit) may leave in a file this release opens."""
    journal = Journal(str(tmp_path / "journal.sqlite3"))
    for seq, state in enumerate([*JobState, 9], start=1):
        row = new_row(
            seq=seq,
            msgid=f"m{seq}",
            queue="default",
            priority=0,
            state=state,
            guarantee=True,
            headers=b"",
            body=b'["run", {}]',
            client=b"c",
            accepted=1000.0,
        )
        journal.add(row)
    journal.commit()
    return journal


def test_a_row_in_a_state_this_release_does_not_know_stops_nothing(tmp_path: Path) -> None:
    # The counts the router starts from and the CANCEL lookup read such a row
    # without raising (before JobState they were plain ints: an unknown one was
    # left alone); the known states are counted as before.
    journal = _journal_with_a_state_of_another_version(tmp_path)
    try:
        counts = journal.counts()
        assert set(counts) == set(JobState)
        assert {state: sum(c.values()) for state, c in counts.items()} == dict.fromkeys(JobState, 1)
        assert journal.find("m5") is None  # not a row this release can act on
        found = journal.find("m2")
        assert found is not None and found[0] is JobState.LEASED
    finally:
        journal.close()
