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

The table is pure: the clock (unix time) is passed in, and what it reads back
after a start comes from a callable. That is :func:`held_rows`, the keys of
the jobs the journal holds (:meth:`UniqueKeys.rebuild_later`): the waiting
ones (those handed out before the restart wait again) and those handed out
since. Not at start-up but at the first unique job's check: reading every
waiting job costs about 1.3 s per 100,000
(the journal has no read of the headers alone), which a router whose clients
send no unique job should not pay. Not rebuilt: a key whose job had finished
with ``unique-for`` left (finished jobs leave the journal), and a delayed
job's until it is due (the journal has no read of delayed rows; the book
takes its key back then).
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol.headers import UNIQUE_KEY, Headers, parse_headers
from django_eventmq.protocol.unique import not_unique_reason
from django_eventmq.protocol.views import stored_request
from django_eventmq.router.journal.api import JournalLike
from django_eventmq.router.journal.schema import WAITING
from django_eventmq.router.journal.store import JournalUnavailable
from django_eventmq.router.routing import Routing

log = logging.getLogger("django_eventmq.router")

#: Rows read from the journal at a time while rebuilding (fewer, bigger pages are
#: faster: each page query starts again from the index).
PAGE = 20_000
#: What a rebuild reads: ``(msgid, header frame, accepted unix time)`` of held jobs.
HeldRows = Iterable[tuple[str, bytes, float]]
_MARK = UNIQUE_KEY.encode() + b":"


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
        #: The held jobs to read back before the next check (see :meth:`rebuild_later`).
        self._pending: Callable[[], HeldRows] | None = None

    def rebuild_later(self, rows: Callable[[], HeldRows]) -> None:
        """Read ``rows()`` back (:meth:`rebuild`) just before the first key is looked up."""
        self._pending = rows

    def _complete(self) -> None:
        pending = self._pending
        if pending is None:
            return
        try:
            taken = self.rebuild(pending())
        except JournalUnavailable as exc:  # tried again at the next unique job
            log.warning("unique keys not read back yet: journal: %s", exc.reason)
            return
        self._pending = None
        log.info("unique keys read back: %d held by jobs in the journal", taken)

    def __len__(self) -> int:
        """Keys taken now (by a held job, or for what is left of its ``unique-for``);
        before the first unique job after a start, only those taken since."""
        self._purge(self._clock())
        return len(self._keys)

    def holder(self, key: str) -> str | None:
        """The msgid of the job that holds ``key`` now, if any."""
        self._complete()
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
        self._complete()
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

    def _free_for(self, key: str, msgid: str) -> bool:
        found = self._keys.get(key)
        return (
            found is None
            or found.msgid == msgid
            or (not found.held and found.until <= self._clock())
        )

    def rebuild(self, rows: HeldRows) -> int:
        """Take the keys of held jobs read from the journal, ``(msgid, header frame,
        accepted)`` each; returns how many. A key another job holds stays its own;
        unreadable headers are skipped (the job stays)."""
        taken = 0
        for msgid, raw, accepted in rows:
            if _MARK not in raw:
                continue
            try:
                headers = parse_headers(raw.decode())
            except (ProtocolError, UnicodeDecodeError):
                continue
            key = headers.unique_key
            if key is not None and self._free_for(key, msgid):
                self.hold(msgid, headers, accepted)
                taken += 1
        return taken


def held_rows(journal: JournalLike, routing: Routing) -> Iterator[tuple[str, bytes, float]]:
    """``(msgid, header frame, accepted)`` of every job that waits in ``journal`` (after
    :meth:`~.journal.store.Journal.recover`, those handed out before a restart wait
    too), then of those ``routing`` has handed out since."""
    for queue in list(journal.counts()[WAITING]):
        after: tuple[int, int] | None = None
        while True:
            rows = journal.waiting(queue, after, PAGE)
            for row in rows:
                yield row.msgid, row.headers, row.accepted
            if len(rows) < PAGE:
                break
            after = (rows[-1].nprio, rows[-1].seq)
    for job in list(routing.inflight.values()):
        headers = stored_request(job.frames).headers
        if _MARK in headers and (found := journal.find(job.msgid)) is not None:
            yield job.msgid, headers, found[1].accepted
