"""Unique jobs: which job holds each ``unique-key``, and whether a new one may have it.

The router is the one place every sender's jobs meet, so it keeps the table:
key -> the msgid that holds it. A key is taken when a job carrying it is
accepted and stays taken while that job is held (queued, delayed, running,
waiting for a retry) and until ``unique-for`` seconds after it was accepted,
whichever is later. Another job with the key is refused in that time
(:meth:`UniqueKeys.refusal`); the same msgid sent again is not (it is the
ordinary duplicate that the book acknowledges again). The job's end (DONE,
REPLY, cancelled, expired, poisoned) frees the key, or leaves it taken for
what is left of ``unique-for``.

The table is pure: the clock (unix time) is passed in. After a start the
book reads the held jobs' keys back from the journal (:meth:`UniqueKeys.rebuild`
of ``journal.unique_rows()``: waiting, delayed and handed-out jobs whose header
frame holds ``unique-key:``, picked in SQL), before the router answers anyone:
the scan costs about 50 ms per 100,000 held jobs without a key, and each
unique job read back a few microseconds more. Not rebuilt: a key whose job had
finished with ``unique-for`` left (finished jobs leave the journal).
"""

from __future__ import annotations

import heapq
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django_eventmq.protocol.headers import UNIQUE_FOR, UNIQUE_KEY, Headers
from django_eventmq.protocol.unique import not_unique_reason

if TYPE_CHECKING:
    from django_eventmq.router.waiting import RoutedJob

#: What a rebuild reads: ``(msgid, header frame, accepted unix time)`` of held jobs.
HeldRows = Iterable[tuple[str, bytes, float]]
# The items of a header frame a rebuild reads (blanks around an item are allowed):
# a key of 16 to 128 lowercase hex digits, a whole number of seconds.
_ITEM = rb"(?:^|,)\s*%s:(%s)\s*(?=,|$)"
_KEY_ITEM = re.compile(_ITEM % (UNIQUE_KEY.encode(), rb"[0-9a-f]{16,128}"))
_FOR_ITEM = re.compile(_ITEM % (UNIQUE_FOR.encode(), rb"[0-9]+"))


@dataclass(slots=True)
class _Holder:
    msgid: str
    #: Unix time until which the key stays taken after the job ends.
    until: float
    #: The job is held (queued, delayed or running).
    held: bool = True


class UniqueKeys:
    """The router's unique-key table (see the module doc)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._keys: dict[str, _Holder] = {}
        #: Held jobs' msgid -> key, so a job's end finds its key.
        self._of: dict[str, str] = {}
        #: (until, key) of keys whose job ended before ``until``: freed then.
        self._ending: list[tuple[float, str]] = []
        #: Jobs refused because another held their key, per queue (MONITOR).
        self.refused: Counter[str] = Counter()

    def __len__(self) -> int:
        """Keys taken now (by a held job, or for what is left of its ``unique-for``)."""
        self._purge(self._clock())
        return len(self._keys)

    def holder(self, key: str) -> str | None:
        """The msgid of the job that holds ``key`` now, if any."""
        found = self._keys.get(key)
        if found is None or (not found.held and found.until <= self._clock()):
            return None
        return found.msgid

    def refusal(self, msgid: str, queue: str, headers: Headers) -> str | None:
        """Why job ``msgid`` (of ``queue``, with ``headers``) is refused as not unique;
        None if it has no key, the key is free, or ``msgid`` is its holder."""
        key = headers.unique_key
        if key is None:
            return None
        found = self._keys.get(key)
        if found is None or found.msgid == msgid:
            return None
        now = self._clock()
        if not found.held and found.until <= now:
            del self._keys[key]
            return None
        self.refused[queue] += 1
        if found.held:
            why = "it is queued or running"
        else:
            why = f"it finished; the key is taken for {math.ceil(found.until - now)} s more"
        return not_unique_reason(found.msgid, why)

    def hold(self, msgid: str, headers: Headers, accepted: float) -> None:
        """Job ``msgid`` was accepted at unix time ``accepted``: it takes its key."""
        key = headers.unique_key
        if key is None:
            return
        self._purge(self._clock())
        self._keys[key] = _Holder(msgid, accepted + headers.unique_for)
        self._of[msgid] = key

    # -- the book's stages (:mod:`.stages`) ------------------------------------------
    # Each as cheap as the call it replaced for a job without a key (one check).
    def on_accepted(self, job: RoutedJob, headers: Headers, wall: float) -> None:
        if headers.unique_key is not None:
            self.hold(job.msgid, headers, wall)

    def on_finished(self, job: RoutedJob) -> None:
        if self._of:  # some held job has a key
            self.release(job.msgid)

    #: Poisoned: its key is freed (retried from the admin, it takes it again).
    on_set_aside = on_finished

    def release(self, msgid: str) -> None:
        """Job ``msgid`` ended: its key is free, or taken until its ``unique-for`` ends."""
        key = self._of.pop(msgid, None)
        if key is None:
            return
        found = self._keys.get(key)
        if found is None or found.msgid != msgid:
            return  # taken over (two held jobs had it: rebuilt from an older journal)
        now = self._clock()
        if found.until <= now:
            del self._keys[key]
        else:
            found.held = False
            heapq.heappush(self._ending, (found.until, key))
        self._purge(now)

    def _purge(self, now: float) -> None:
        """Free the keys whose ``unique-for`` ran out after their job ended."""
        ending = self._ending
        while ending and ending[0][0] <= now:
            _, key = heapq.heappop(ending)
            found = self._keys.get(key)
            if found is not None and not found.held and found.until <= now:
                del self._keys[key]

    def rebuild(self, rows: HeldRows) -> int:
        """Take the keys of held jobs read from the journal, ``(msgid, header frame,
        accepted)`` each; returns how many. A key another job holds stays its own;
        unreadable headers are skipped (the job stays)."""
        now = self._clock()
        self._purge(now)
        keys, of = self._keys, self._of
        taken = 0
        for msgid, raw, accepted in rows:
            unique = _unique_of(raw)
            if unique is None:
                continue
            key, seconds = unique
            found = keys.get(key)
            if found is not None and found.msgid != msgid and (found.held or found.until > now):
                continue
            keys[key] = _Holder(msgid, accepted + seconds)
            of[msgid] = key
            taken += 1
        return taken


def _unique_of(raw: bytes) -> tuple[str, int] | None:
    """``(unique-key, unique-for)`` of a stored header frame, None without a readable
    key. Only those two items are read (the last of each, as a full parse does),
    by patterns that take only the values :mod:`.protocol.headers` accepts: a
    full parse costs several times more, and the frame was parsed whole when its
    job was accepted."""
    keys = _KEY_ITEM.findall(raw)
    if not keys:
        return None
    windows = _FOR_ITEM.findall(raw)
    return keys[-1].decode(), int(windows[-1]) if windows else 0
