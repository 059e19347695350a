"""The msgids of recently finished jobs (table ``finished``): a REQUEST resent
after a restart is still recognised. Pruned by age and count inside a commit
(:meth:`.commit.JournalBase._prune_finished`)."""

from __future__ import annotations

from django_eventmq.router.journal.commit import JournalBase


class FinishedStore(JournalBase):
    """The finished msgids of :class:`.store.Journal`."""

    # -- finished msgids ------------------------------------------------------
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
