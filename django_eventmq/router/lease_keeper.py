"""The leader's side of a router group's lease, as the router's loop keeps it.

A group's leader (:mod:`.group`) serves on a journal whose every commit is
fenced by its epoch (:func:`.leadership.fence`). Fencing stops a deposed
leader's *writes*; :class:`LeaseKeeper` stops its *sends*: the router asks it
:meth:`~LeaseKeeper.check` after each poll, before it handles or sends
anything, and :meth:`~LeaseKeeper.heartbeat` at the end of each iteration.
Both raise the journal's ``LeadershipLost`` when another member leads. No
psycopg here: the journal is only known by its :class:`LeasedJournal` side.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

__all__ = ["LeaseKeeper", "LeasedJournal"]


@runtime_checkable
class LeasedJournal(Protocol):
    """The lease side of a router group's journal (PostgreSQL; the group's leader)."""

    def lease_valid(self, now: float) -> bool:
        """True while the lease surely holds at monotonic ``now`` (a fence recent
        enough, and the server has not ended the journal's connection)."""
        ...

    def renew(self) -> None:
        """Renew the lease now (one fenced transaction), or raise ``LeadershipLost``."""
        ...


class LeaseKeeper:
    """Checks the lease before a loop iteration acts and renews it while idle."""

    def __init__(self, journal: LeasedJournal, lease_seconds: float) -> None:
        self.journal = journal
        #: Renew at least this often (seconds) when no commit renewed it.
        self.every = lease_seconds / 3
        #: Monotonic time of the last fenced commit or renewal.
        self.renewed = time.monotonic()

    def check(self) -> None:
        """Before anything is handled or sent: a router resumed after a pause
        (SIGSTOP, a VM freeze) learns here that another one may lead now; so does
        one whose journal connection the server ended (a standby takes over at
        once then, while the lease still runs)."""
        journal = self.journal
        if not journal.lease_valid(time.monotonic()):
            journal.renew()
            self.renewed = time.monotonic()

    def committed(self) -> None:
        """A commit with writes went through: it was fenced, the lease holds."""
        self.renewed = time.monotonic()

    def heartbeat(self) -> None:
        """Renew when no commit did for a third of the lease."""
        clock = time.monotonic()
        if clock - self.renewed >= self.every:
            self.journal.renew()
            self.renewed = clock
