"""The journal's files: created mode 0600, locked to one router, checked at start.

Damage: every ``MARK_INTERVAL`` seconds (and at close) a commit also counts
itself in the ``meta`` table, and once it returned ``PATH.mark`` records that
count: the journal reached it. SQLite silently ignores a deleted, truncated or
garbled ``-wal`` file; a journal whose count is below its mark lost committed
writes, and the journal's open (:func:`check_file`) refuses it, as it refuses
one that fails ``PRAGMA quick_check``. :func:`.salvage.salvage` copies
what SQLite can still read into a new journal and moves the damaged files aside.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sqlite3
from pathlib import Path
from typing import IO

from django_eventmq.errors import ConfigurationError


class JournalDamaged(ConfigurationError):
    """The journal failed its checks at start-up; the message says what to do."""


#: :func:`describe`'s cause for a full disk.
DISK_FULL = "disk full"


def describe(exc: BaseException) -> str:
    """A short cause for a SQLite or OS error, for the one log line an operator reads."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name.startswith("SQLITE_FULL") or getattr(exc, "errno", None) == 28:
        return DISK_FULL
    if name.startswith("SQLITE_BUSY") or name.startswith("SQLITE_LOCKED"):
        return "locked by another connection (an sqlite3 shell, a backup, a VACUUM?)"
    if (
        name.startswith("SQLITE_READONLY")
        or isinstance(exc, PermissionError)
        or getattr(exc, "errno", None) == errno.EROFS
    ):
        return "not writable (read-only or immutable file or directory)"
    if name.startswith("SQLITE_IOERR"):
        return f"I/O error ({exc})"
    return str(exc) or type(exc).__name__


def resolve_path(template: str, frontend_address: str) -> str:
    """The journal file for a router bound to ``frontend_address``."""
    if "{frontend}" not in template:
        return template
    tag = frontend_address.split("://", 1)[-1]
    tag = "".join(c if c.isalnum() or c in "._-" else "-" for c in tag).strip("-")
    return template.replace("{frontend}", tag or "router")


def exclusive_lock(path: str) -> IO[bytes]:
    """Hold ``path.lock`` for this process: two routers must never share a journal."""
    fd = os.open(path + ".lock", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    handle = os.fdopen(fd, "ab")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise ConfigurationError(
            f"JOURNAL_PATH: {path} is in use by another router; give each router its own "
            "journal file"
        ) from None
    return handle


# -- files, damage and salvage (see the module doc) ----------------------------------
def create_private(path: str) -> None:
    """Create the journal's directory, and the file itself mode 0600: it holds job
    bodies, and SQLite gives its -wal and -shm files the database file's mode."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def check_file(path: str) -> None:
    """Refuse a damaged journal (:class:`JournalDamaged`): SQLite's own check of the
    file, and its commit count against its mark. Read-only, so that a refused
    journal stays exactly as it was (closing a writer would checkpoint what is
    left of a damaged -wal file into it and delete that file)."""
    mark = read_mark(path)
    if not os.path.exists(path):
        if mark:
            raise JournalDamaged(
                damaged_message(
                    path,
                    f"the file is missing but {path}.mark says {mark} commit(s) were made; "
                    f"if you removed it on purpose, remove {path}.mark too",
                )
            )
        return
    try:
        db = sqlite3.connect(Path(path).absolute().as_uri() + "?mode=ro", uri=True)
    except sqlite3.Error:
        return  # the writer's open says what is wrong
    try:
        problems = [str(row[0]) for row in db.execute("PRAGMA quick_check(5)")]
        if problems != ["ok"]:
            raise JournalDamaged(damaged_message(path, "; ".join(problems)))
        try:
            commits = int(db.execute("SELECT value FROM meta WHERE key = 'commits'").fetchone()[0])
        except (sqlite3.OperationalError, TypeError):
            commits = 0  # no meta table (yet): none counted
        if mark is not None and commits < mark:
            raise JournalDamaged(
                damaged_message(
                    path,
                    f"it holds {commits} commit(s) but {path}.mark says {mark} were made: its "
                    "-wal file was deleted, truncated or damaged, or the journal file was "
                    "replaced",
                )
            )
    except sqlite3.DatabaseError as exc:
        if is_damage(exc):
            raise JournalDamaged(damaged_message(path, str(exc))) from None
    finally:
        db.close()


def is_damage(exc: sqlite3.DatabaseError) -> bool:
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or not isinstance(
        exc, sqlite3.OperationalError
    )


def damaged_message(path: str, detail: str) -> str:
    """What an operator reads when the router refuses a damaged journal."""
    return (
        f"JOURNAL_PATH: journal {path} is damaged ({detail}); the router did not start and "
        "changed nothing. Run the router once with --journal-recover: it copies what SQLite "
        f"can still read into a new journal and moves the damaged files to "
        f"{path}.damaged-TIME (its -wal file and mark too). Or move {path}, {path}-wal and "
        f"{path}.mark away yourself to start with an empty journal."
    )


def unwritable_message(path: str, exc: BaseException) -> str:
    return (
        f"JOURNAL_PATH: cannot write journal {path}: {describe(exc)}. Free space or fix its "
        "permissions (chmod, chattr -i, a read-only mount), or set JOURNAL_PATH elsewhere, "
        "and start again."
    )


def read_mark(path: str) -> int | None:
    """The commit count ``PATH.mark`` says the journal reached (None: no mark)."""
    try:
        text = Path(path + ".mark").read_text()
    except FileNotFoundError:
        return None
    try:
        return int(text.split()[0])
    except (ValueError, IndexError):
        return None  # an unreadable mark proves nothing


def write_mark(path: str, commits: int) -> None:
    """Record (mode 0600, replaced whole) that the journal reached ``commits`` commits."""
    partial = path + ".mark.new"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(f"{commits}\n")
    os.replace(partial, path + ".mark")
