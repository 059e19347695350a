"""``--journal-recover``: copy what SQLite can still read of a damaged journal
into a new one, and move the damaged files aside (see :mod:`.check`)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time

from django_eventmq.router.journal.check import exclusive_lock, read_mark
from django_eventmq.router.journal.store import Journal


def salvage(path: str) -> tuple[str, dict[str, int], int]:
    """Move a damaged journal aside and copy into a new one at ``path`` every row
    SQLite can still read. Returns where the damaged files went, rows copied per
    table, and rows (or runs of rows) that could not be read."""
    lock = exclusive_lock(path)  # no router may be using it
    try:
        aside = f"{path}.damaged-{time.strftime('%Y%m%d-%H%M%S')}"
        for suffix in ("", "-wal", "-shm", ".mark"):
            with contextlib.suppress(FileNotFoundError):
                os.replace(path + suffix, aside + suffix)
    finally:
        lock.close()
    journal = Journal(path, check=False)
    copied: dict[str, int] = {}
    unreadable = 0
    try:
        try:
            # Read-only: the damaged files stay as they were, for a closer look.
            old = sqlite3.connect(f"file:{aside}?mode=ro", uri=True, isolation_level=None)
            tables = {row[0] for row in old.execute("SELECT name FROM sqlite_master")}
        except sqlite3.DatabaseError:
            return aside, copied, 1  # nothing readable (not a database at all)
        commits = 0
        with contextlib.suppress(sqlite3.DatabaseError):
            commits = int(old.execute("SELECT value FROM meta WHERE key = 'commits'").fetchone()[0])
        for (table,) in journal.db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name != 'meta'"
        ).fetchall():
            if table not in tables:
                continue
            columns = [row[1] for row in journal.db.execute(f"PRAGMA table_info({table})")]
            with contextlib.suppress(sqlite3.DatabaseError):  # an older journal has fewer
                had = {row[1] for row in old.execute(f"PRAGMA table_info({table})")}
                columns = [name for name in columns if name in had]
            copied[table], bad = _copy_table(old, journal.db, table, columns)
            unreadable += bad
        old.close()
        journal.commits = max(commits, read_mark(aside) or 0)
        journal.db.execute("UPDATE meta SET value = ? WHERE key = 'commits'", (journal.commits,))
    finally:
        journal.close()
    return aside, copied, unreadable


def _copy_table(
    old: sqlite3.Connection, new: sqlite3.Connection, table: str, columns: list[str]
) -> tuple[int, int]:
    """Copy ``table`` in rowid order, 500 rows at a time; a run that cannot be read
    is skipped (a few rowids at a time, then more). Returns (copied, runs skipped)."""
    names = ", ".join(columns)
    insert = f"INSERT OR IGNORE INTO {table} ({names}) VALUES ({', '.join('?' * len(columns))})"  # noqa: S608
    select = f"SELECT rowid, {names} FROM {table} WHERE rowid > ? ORDER BY rowid LIMIT 500"  # noqa: S608
    last, copied, bad, step = -(2**63), 0, 0, 1
    while bad < 10_000:
        try:
            rows = old.execute(select, (last,)).fetchall()
        except sqlite3.DatabaseError:
            bad += 1
            last += step
            step = min(step * 2, 1 << 20)
            continue
        if not rows:
            break
        step = 1
        new.execute("BEGIN")
        new.executemany(insert, [row[1:] for row in rows])
        new.execute("COMMIT")
        copied += len(rows)
        last = rows[-1][0]
    return copied, bad
