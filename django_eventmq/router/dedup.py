"""Recently finished msgids: a REQUEST resent for a finished job is acknowledged, not run.

The msgids are kept in memory for the lookups (one dict test per REQUEST, no
disk read) and in the router's journal, written with the finished job's
deletion in the same group commit, so the window survives a router restart
or crash: at most ``DEDUP_MEMORY`` msgids, each for ``DEDUP_WINDOW``
seconds after its job finished. A msgid resent after that runs again.

:class:`StoredMsgids` answers another question, for a REQUEST that arrives
while some held jobs are on disk only (the book cannot see their msgids): may
its msgid be in a job row of the journal? Only then is its row inserted at
once to find out (a lookup per job); otherwise it is kept for the group write
as when nothing is on disk only.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

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


#: Bits of :class:`StoredMsgids`' filter (2 MiB): about 1% of msgids never
#: stored are taken for stored ones after a million jobs (then merely
#: inserted at once, as before the filter).
FILTER_BITS = 1 << 24
_MASK = FILTER_BITS - 1
#: Msgids added after which the filter is started again at the next chance
#: (when every held job is in memory), its false positives growing with them.
RESTART_AFTER = 1 << 18


class StoredMsgids:
    """A Bloom filter of the msgids that may be in a job row of the journal.

    The promise: every msgid of a job row is in it (no false negatives); a
    msgid never stored may be said to be (rarely). The book adds the msgid of
    every row it has inserted, and :meth:`restart` starts it again from the
    msgids the book holds in memory at a moment when it holds every job there
    (nothing on disk only): the rows at that moment. ``full`` (every msgid may
    be stored) covers the rows the book did not see inserted: those of the
    journal at start-up and of an opened parcel, until the next restart.

    Two bits per msgid, both from its ``hash()`` (per process, never on disk).
    """

    __slots__ = ("_bits", "added", "full")

    def __init__(self) -> None:
        self._bits = bytearray(FILTER_BITS >> 3)
        self.added = 0
        self.full = True

    def add(self, msgid: str) -> None:
        h = hash(msgid)
        bits = self._bits
        i = h & _MASK
        bits[i >> 3] |= 1 << (i & 7)
        i = (h >> 32) & _MASK
        bits[i >> 3] |= 1 << (i & 7)
        self.added += 1

    def may_hold(self, msgid: str) -> bool:
        """False only if no job row has ``msgid``."""
        if self.full:
            return True
        h = hash(msgid)
        bits = self._bits
        i = h & _MASK
        if not bits[i >> 3] & (1 << (i & 7)):
            return False
        i = (h >> 32) & _MASK
        return bool(bits[i >> 3] & (1 << (i & 7)))

    def stale(self) -> bool:
        """True if a :meth:`restart` would make it answer better."""
        return self.full or self.added > RESTART_AFTER

    def restart(self, held: Iterable[str]) -> None:
        """Start again from ``held``: the msgids of every job row there is now."""
        self._bits = bytearray(FILTER_BITS >> 3)
        self.added = 0
        self.full = False
        for msgid in held:
            self.add(msgid)
