"""A damaged journal at start-up: a real router process refuses it with one clear
line saying what to do, and ``--journal-recover`` salvages what SQLite can read.

SQLite itself ignores a deleted, truncated or garbled ``-wal`` file and opens
the journal as of its last checkpoint: the jobs acknowledged since are gone
without a word. The router's mark file (``PATH.mark``) records a commit count
the journal reached; a journal below it lost committed writes.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import zmq

from django_eventmq.protocol.batch import pack_jobs
from django_eventmq.router.journal.salvage import salvage
from django_eventmq.router.journal.schema import SCHEMA
from django_eventmq.router.journal.store import Journal, JournalDamaged
from tests.router.test_crash import RouterProcess
from tests.router.test_router import JOB, Peer
from tests.router.test_router_journal_failures import (
    FAST,
    answers,
    one_clear_line,
    router_on,
    start_failing,
)
from tests.support import Proc, wait_for
from tests.system.chaos.support import admin_call


def damaged(directory: Path) -> list[Path]:
    """The damaged journal files moved aside (the database file, not its -wal or mark)."""
    return [
        p for p in directory.iterdir() if re.fullmatch(r"journal\.sqlite3\.damaged-[\d-]+", p.name)
    ]


def mark(journal: Path) -> int:
    return int(Path(f"{journal}.mark").read_text().split()[0])


def killed_with_acked_jobs(tmp_path: Path, zctx: zmq.Context[Any], jobs: int) -> RouterProcess:
    """A router that acknowledged ``jobs`` jobs, recorded a mark past them and was
    SIGKILLed (its -wal file holds what it committed since the last checkpoint)."""
    r = RouterProcess(tmp_path, **FAST)
    client = Peer(zctx, r.frontend, b"client")
    try:
        sent = {client.send("REQUEST", "default", "guarantee", JOB) for _ in range(jobs)}
        acked: set[str] = set()
        wait_for(lambda: (acked.update(answers(client, 0.1)), acked >= sent)[1], 20, "the ACKs")
        before = mark(r.journal)

        def marked() -> bool:
            client.send("REQUEST", "default", "guarantee", JOB)  # commits go on
            answers(client, 0.1)
            return mark(r.journal) > before

        wait_for(marked, 20, "a mark written after the ACKs")
        os.kill(r.proc.pid, signal.SIGKILL)
        r.proc.popen.wait(10)
    finally:
        client.close()
        r.stop()
    return r


def start_recovering(journal: Path) -> tuple[Proc, str]:
    proc, admin = router_on(journal, "--journal-recover")
    proc.wait_output(r"router ready")
    return proc, admin


@pytest.mark.parametrize("damage", ["deleted", "truncated", "garbled"])
def test_a_damaged_wal_is_refused_at_start_and_recovered_on_request(
    tmp_path: Path, zctx: zmq.Context[Any], damage: str
) -> None:
    r = killed_with_acked_jobs(tmp_path, zctx, 30)
    wal = Path(f"{r.journal}-wal")
    size = wal.stat().st_size
    if damage == "deleted":
        wal.unlink()
        size = 0
    elif damage == "truncated":
        # Keep the header and the first frame only. Half the file was not always
        # damage: after a checkpoint SQLite writes the WAL again from its start and
        # the frames past the current ones are stale, so the cut could miss them all.
        page_size = int.from_bytes(wal.read_bytes()[8:12], "big")
        size = 32 + 24 + page_size
        os.truncate(wal, size)
    else:
        with open(wal, "r+b") as handle:
            handle.seek(32)  # past the WAL header: every frame's checksum breaks
            handle.write(os.urandom(size - 32))

    refused = start_failing(r.journal)
    one_clear_line(refused, f"journal {r.journal} is damaged")
    assert "--journal-recover" in refused.output()
    # Nothing was changed (a reader of a journal whose -wal is gone makes an empty one).
    assert not wal.exists() or wal.stat().st_size == size

    proc, admin = start_recovering(r.journal)
    try:
        assert f"journal {r.journal} recovered" in proc.output()
        (aside,) = damaged(tmp_path)
        assert admin_call(admin, "MONITOR")["journal_failure"] is None
    finally:
        proc.stop()
    assert aside.stat().st_size > 0
    # Recovered once: the next start is a plain one.
    again = RouterProcess(tmp_path, **FAST)
    again.stop()
    assert "recovered" not in again.proc.output()


def test_a_garbage_journal_file_is_refused_and_moved_aside_on_request(tmp_path: Path) -> None:
    journal = tmp_path / "journal.sqlite3"
    journal.write_bytes(os.urandom(50_000))
    one_clear_line(start_failing(journal), f"journal {journal} is damaged (file is not a database)")
    proc, admin = start_recovering(journal)
    try:
        assert admin_call(admin, "MONITOR")["queued"] == 0
    finally:
        proc.stop()
    (aside,) = damaged(tmp_path)
    assert aside.stat().st_size == 50_000


def test_recovering_a_journal_made_before_owners_and_parcel_digests(tmp_path: Path) -> None:
    """An older journal (no jobs.owner column, no parcel_digests table) is salvaged
    whole: its jobs, parcels and finished msgids, and the new journal opens as usual."""
    path = tmp_path / "journal.sqlite3"
    older = re.sub(r",\n    owner TEXT", "", SCHEMA)
    older = re.sub(r"CREATE TABLE IF NOT EXISTS parcel_digests \([^;]*\);", "", older)
    db = sqlite3.connect(path)
    db.executescript(older)
    assert "owner" not in {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
    assert "parcel_digests" not in {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    db.executemany(
        "INSERT INTO jobs (seq, msgid, queue, nprio, state, guarantee, headers, body, client,"
        " accepted) VALUES (?, ?, 'default', 0, 0, 1, x'00', ?, x'63', 1.0)",
        [(seq, f"m{seq}", JOB.encode()) for seq in (1, 2)],
    )
    frame = pack_jobs((b"p1", b"default", b"guarantee", JOB.encode()) for _ in range(1))
    db.execute(
        "INSERT INTO parcels (seq, count, queue, nprio, guarantee, headers, client, accepted,"
        " jobs) VALUES (3, 1, 'default', 0, 1, x'00', x'63', 1.0, ?)",
        (frame,),
    )
    db.execute("INSERT INTO finished (seq, msgid, at) VALUES (1, 'done', 1.0)")
    db.commit()
    db.close()

    _aside, copied, unreadable = salvage(str(path))
    assert unreadable == 0
    assert copied == {"jobs": 2, "parcels": 1, "finished": 1, "schedules": 0}
    journal = Journal(str(path))
    try:
        assert journal.holds_row("m1") and journal.holds_row("m2")
        assert journal.owner_of("m1") == ""  # held, no owner known
        assert journal.parcel_count() == 1
    finally:
        journal.close()


def test_a_journal_removed_on_purpose_with_its_mark_left_says_to_remove_the_mark(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.sqlite3"
    Journal(str(path)).close()  # its open writes a mark
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    with pytest.raises(JournalDamaged) as refused:
        Journal(str(path))
    assert f"if you removed it on purpose, remove {path}.mark too" in str(refused.value)
    Path(f"{path}.mark").unlink()
    Journal(str(path)).close()  # then it starts empty
