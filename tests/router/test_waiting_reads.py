"""Reading a queue's waiting jobs back from the SQLite journal after a key: each
statement is one index range (the jobs loaded before are not walked again), and
the rows come in hand-out order across priorities."""

from __future__ import annotations

from pathlib import Path

from django_eventmq.router.journal import store
from django_eventmq.router.journal.store import LEASED, Journal
from tests.router.test_journal import add


def test_the_read_after_a_key_seeks_the_whole_key(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path / "journal.sqlite3"))
    try:
        plans = [
            " ".join(str(row[-1]) for row in journal.db.execute(f"EXPLAIN QUERY PLAN {sql}", p))
            for sql, p in (
                (store._WAITING_AFTER, ("default", 0, 0, 10)),
                (store._WAITING_BELOW, ("default", 0, 10)),
            )
        ]
    finally:
        journal.close()
    assert "INDEX jobs_waiting (queue=? AND nprio=? AND seq>?)" in plans[0], plans[0]
    assert "INDEX jobs_waiting (queue=? AND nprio>?)" in plans[1], plans[1]


def test_waiting_after_a_key_goes_on_into_lower_priorities(tmp_path: Path) -> None:
    journal = Journal(str(tmp_path / "journal.sqlite3"))
    priorities = {1: 5, 2: 0, 3: 5, 4: -1, 5: 0, 6: 0, 7: 5, 8: -1}
    for seq, priority in priorities.items():
        add(journal, seq, priority=priority)
    add(journal, 9, priority=0, state=LEASED)  # not waiting
    add(journal, 10, priority=0, queue="other")
    order = [1, 3, 7, 2, 5, 6, 4, 8]  # highest priority first, then oldest
    for after_at in range(len(order)):
        seq = order[after_at]
        key = (-priorities[seq], seq)
        for limit in (1, 2, 3, 10):
            rows = journal.waiting("default", key, limit)
            assert [row.seq for row in rows] == order[after_at + 1 :][:limit]
    assert [row.seq for row in journal.waiting("default", None, 10)] == order
    journal.close()
