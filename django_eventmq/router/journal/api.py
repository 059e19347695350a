"""What the router asks of its journal, whichever the backend: the SQLite
:class:`.store.Journal` or the PostgreSQL :class:`.postgres.PostgresJournal`.

:class:`JournalLike` is a :class:`typing.Protocol`: both classes match it
structurally (mypy checks that at the end of :mod:`.postgres`), so the router
can be typed against it. :class:`KeptWrites` is the part both do the same way
in memory: the writes kept until the next read or commit (see
:mod:`.commit`'s module doc), each backend applying them its own way.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Container
from typing import Any, Protocol

from django_eventmq.router.journal.schema import (
    COLUMN_AT,
    DELAYED,
    POISONED,
    WAITING,
    JobState,
    Parcel,
    Row,
)


class JournalLike(Protocol):
    """The journal's surface that ``router/*.py`` uses."""

    #: Where the journal is (a file, ":memory:", or a DSN without password + "#group").
    path: str
    #: Row changes not yet committed.
    pending: int
    #: Commits made.
    syncs: int
    #: Why the journal cannot be written now (None: it can).
    failure: str | None

    @property
    def closed(self) -> bool: ...

    def commit(self) -> bool: ...
    def close(self) -> None: ...

    # jobs
    def add(self, values: list[Any], *, on_disk: bool = False) -> bool: ...
    def add_many(self, rows: list[list[Any]]) -> set[int]: ...
    def set_state(self, seq: int, state: JobState) -> None: ...
    def requeue(self, seq: int, deaths: int) -> None: ...
    def delay(self, seq: int, due: float, attempts: int) -> None: ...
    def poison(self, seq: int, deaths: int, reason: str) -> None: ...
    def unpoison(self, seq: int) -> None: ...
    def delete(self, seq: int) -> None: ...
    def holds_row(self, msgid: str) -> bool: ...
    def waiting(self, queue: str, after: tuple[int, int] | None, limit: int) -> list[Row]: ...
    def take_due(self, now: float, limit: int = 1000) -> list[Row]: ...
    def next_due(self) -> float | None: ...
    def find(self, msgid: str) -> tuple[JobState, Row] | None: ...
    def unique_rows(self) -> list[tuple[str, bytes, float]]: ...
    def owner_of(self, msgid: str) -> str | None: ...
    def poisoned(self, limit: int = 100) -> list[tuple[Row, str]]: ...
    def counts(self) -> dict[JobState, Counter[str]]: ...
    def max_seq(self) -> int: ...
    def recover(self) -> int: ...
    def size_bytes(self) -> int: ...
    def is_empty(self) -> bool: ...

    # parcels
    def add_parcel(self, parcel: Parcel) -> None: ...
    def holds_parcel(self, digest: bytes) -> bool: ...
    def parcel_count(self) -> int: ...
    def next_parcel(self, queue: str, upto: tuple[int, int] | None) -> int | None: ...
    def parcels_holding(self, msgid: str) -> list[int]: ...
    def open_parcel(self, seq: int, skip: Container[str]) -> tuple[str, int]: ...

    # finished msgids
    def keep_finished(
        self, keep: int, window: float, clock: Callable[[], float] = time.time
    ) -> None: ...
    def add_finished(self, msgid: str, at: float) -> None: ...
    def finished_since(self, since: float) -> list[tuple[str, float]]: ...
    def prune_finished(self) -> None: ...
    def finished_count(self) -> int: ...

    # SCHEDULE / UNSCHEDULE kept for a scheduler
    def add_schedule(
        self, frames: list[bytes], *, unschedule: bool, job_key: str, timing_key: str
    ) -> None: ...
    def drop_schedules(self, job_key: str, timing_key: str) -> int: ...
    def keep_unschedule(self, frames: list[bytes], job_key: str, timing_key: str) -> int: ...
    def schedules(self, limit: int = 1000) -> list[tuple[int, bool, list[bytes]]]: ...
    def delete_schedule(self, seq: int) -> None: ...
    def schedule_count(self) -> int: ...


class KeptWrites:
    """Writes kept in memory until the backend applies them (``_flush``): new rows
    by seq and their msgids, column changes merged per seq, deleted seqs, finished
    msgids. A backend provides :meth:`_begin` (count ``changes``; the SQLite
    journal also opens its transaction there) and :meth:`_insert_now`."""

    #: Row changes not yet committed (the backend's commit counts and clears them).
    pending: int

    def _init_kept(self) -> None:
        self.pending = 0
        self._new: dict[int, list[Any]] = {}
        self._new_msgids: set[str] = set()
        self._changed: dict[int, dict[str, Any]] = {}
        self._gone: set[int] = set()
        self._done: list[tuple[int, str, float]] = []
        #: Finished msgids kept: at most this many, for at least this many seconds
        #: (set by :meth:`keep_finished`; 0 keeps none).
        self.finished_keep = 0
        self.finished_window = 0.0
        self._finished_seq = 0
        self._finished_added = False
        self._finished_clock: Callable[[], float] = time.time

    def _begin(self, changes: int = 1) -> None:
        raise NotImplementedError

    def _insert_now(self, values: list[Any]) -> bool:
        """Insert one new job at once; False if its msgid (or seq) is stored already."""
        raise NotImplementedError

    def _fresh(self) -> None:
        """Apply the kept writes (before a read or write that must see them)."""
        raise NotImplementedError

    def add(self, values: list[Any], *, on_disk: bool = False) -> bool:
        """Store a new job (its :func:`.schema.job_values`); False (nothing stored) when
        its msgid is held already.

        Kept for the next write unless ``on_disk`` says the msgid may be stored
        already: then the row is inserted at once, so that the insert finds out
        (cheaper than a lookup first). Without it a msgid that is only stored,
        not kept, is not seen.
        """
        seq, msgid = values[0], values[1]
        if msgid in self._new_msgids:
            return False
        # Changes kept for this seq came before the row existed: written in
        # order they would have changed nothing.
        self._changed.pop(seq, None)
        self._gone.discard(seq)
        if on_disk:
            if self._insert_now(values):
                return True
            if not self._gone:
                return False
            # Its msgid may be a finished job's whose delete is kept: apply it, ask again.
            self._fresh()
            return self._insert_now(values)
        self._begin()
        self._new[seq] = values
        self._new_msgids.add(msgid)
        return True

    def _change(self, seq: int, **columns: Any) -> None:
        self._begin()
        new = self._new.get(seq)
        if new is not None:
            for name, value in columns.items():
                new[COLUMN_AT[name]] = value
        else:
            self._changed.setdefault(seq, {}).update(columns)

    def set_state(self, seq: int, state: JobState) -> None:
        self._change(seq, state=state)

    def requeue(self, seq: int, deaths: int) -> None:
        self._change(seq, state=WAITING, deaths=deaths)

    def delay(self, seq: int, due: float, attempts: int) -> None:
        self._change(seq, state=DELAYED, due=due, attempts=attempts)

    def poison(self, seq: int, deaths: int, reason: str) -> None:
        self._change(seq, state=POISONED, deaths=deaths, reason=reason)

    def unpoison(self, seq: int) -> None:
        """A POISONED job waits again, its deaths forgotten (retried from the admin)."""
        self._change(seq, state=WAITING, deaths=0, reason="")

    def delete(self, seq: int) -> None:
        self._begin()
        new = self._new.pop(seq, None)
        if new is not None:
            self._new_msgids.discard(new[1])
            return
        self._changed.pop(seq, None)
        self._gone.add(seq)

    def keep_finished(
        self, keep: int, window: float, clock: Callable[[], float] = time.time
    ) -> None:
        """Keep up to ``keep`` finished msgids for ``window`` seconds (0: none) of ``clock``."""
        self.finished_keep = keep
        self.finished_window = window
        self._finished_clock = clock

    def add_finished(self, msgid: str, at: float) -> None:
        """Remember that ``msgid`` finished at unix time ``at`` (committed with the rest)."""
        if not self.finished_keep or not self.finished_window:
            return
        self._finished_seq += 1
        self._begin()
        self._done.append((self._finished_seq, msgid, at))
        self._finished_added = True

    def _kept(self) -> bool:
        """True if some write is kept (a read must apply it first)."""
        return bool(self._new or self._changed or self._gone or self._done)
