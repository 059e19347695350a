"""The msgids of recently finished jobs (table ``finished``): a REQUEST resent
after a restart is still recognised. Pruned by age and count inside a commit
(:meth:`.journal_commit.JournalBase._prune_finished`)."""

from __future__ import annotations

import time
from collections.abc import Callable

from django_eventmq.router.journal.commit import JournalBase


class FinishedStore(JournalBase):
    """The finished msgids of :class:`.journal.Journal`."""

    # -- finished msgids ------------------------------------------------------
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

    def finished_since(self, since: float) -> list[tuple[str, float]]:
        """The newest ``finished_keep`` msgids finished at or after ``since``, oldest first."""
        self._flush()
        rows = self._execute(
            "SELECT msgid, at FROM finished WHERE at >= ? ORDER BY seq DESC LIMIT ?",
            (since, self.finished_keep),
        ).fetchall()
        rows.reverse()
        return [(str(msgid), float(at)) for msgid, at in rows]

    def prune_finished(self) -> None:
        """Drop finished msgids past the window or the count now (at start-up)."""
        self._flush()
        self._prune_finished(self._finished_clock(), force=True)

    def finished_count(self) -> int:
        self._flush()
        return int(self._execute("SELECT COUNT(*) FROM finished").fetchone()[0])
