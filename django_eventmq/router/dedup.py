"""Recently finished msgids: a REQUEST resent for a finished job is acknowledged, not run.

The msgids are kept in memory for the lookups (one dict test per REQUEST, no
disk read) and in the router's journal, written with the finished job's
deletion in the same group commit, so the window survives a router restart
or crash: at most ``DEDUP_MEMORY`` msgids, each for ``DEDUP_WINDOW``
seconds after its job finished. A msgid resent after that runs again.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from django_eventmq.router.journal.api import JournalLike


class FinishedWindow:
    """The msgids of jobs finished in the last ``window`` seconds (at most ``keep``)."""

    def __init__(
        self,
        journal: JournalLike,
        keep: int,
        window: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.journal = journal
        self.keep = keep if window > 0 else 0
        self.window = window
        self._clock = clock
        #: msgid -> unix time finished, oldest first.
        self._recent: OrderedDict[str, float] = OrderedDict()
        journal.keep_finished(self.keep, window, clock)

    def __contains__(self, msgid: object) -> bool:
        at = self._recent.get(msgid) if isinstance(msgid, str) else None
        if at is None:
            return False
        # Pruning only happens as jobs finish: an entry may have outlived the
        # window while none did. The clock is read only on a hit (rare).
        now = self._clock()
        if at >= now - self.window:
            return True
        self._prune(now)
        return False

    def __len__(self) -> int:
        return len(self._recent)

    def load(self) -> int:
        """After a restart: the journal's msgids still inside the window. Returns how many."""
        self.journal.prune_finished()  # none kept: all go
        if not self.keep:
            return 0
        for msgid, at in self.journal.finished_since(self._clock() - self.window):
            self._recent[msgid] = at
        self._prune(self._clock())
        return len(self._recent)

    def add(self, msgid: str) -> None:
        """``msgid`` finished now: refuse a resend of it for the window."""
        if not self.keep:
            return
        now = self._clock()
        recent = self._recent
        recent.pop(msgid, None)  # finished again: its window starts again
        recent[msgid] = now
        self.journal.add_finished(msgid, now)
        self._prune(now)

    def _prune(self, now: float) -> None:
        recent = self._recent
        while len(recent) > self.keep:
            recent.popitem(last=False)
        horizon = now - self.window
        while recent and next(iter(recent.values())) < horizon:
            recent.popitem(last=False)
