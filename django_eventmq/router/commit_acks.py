"""The router's journal commits and the ACKs that wait for them.

One commit (a group commit: one sync for everything a loop iteration
changed) stores what clients sent; only then are their ACKs sent, bundled to
the clients that read bundles. New jobs went to their job managers before the
commit, while it is in flight, except where :class:`.hand_outs.HandOuts` waits
for a commit that returned (a failing journal, a group's leader): those are
sent after the ACKs. Under load the ACKs wait a little for
a bigger group (:data:`COMMIT_GROUP_WAIT`, :data:`COMMIT_GROUP_MAX`).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from django_eventmq.protocol import Message, new_msgid
from django_eventmq.protocol.bundle import MAX_BUNDLE_MESSAGES, ack_bundle, bundle, runs
from django_eventmq.protocol.frame_fields import ack_frames
from django_eventmq.protocol.packed import pack
from django_eventmq.router.book import Book
from django_eventmq.router.hand_outs import HandOuts
from django_eventmq.router.lease_keeper import LeaseKeeper
from django_eventmq.runtime.outbox import Outbox, send
from django_eventmq.runtime.transport import Channel

#: Clients remembered as reading bundles (:meth:`CommitAcks.reads_bundles`).
BUNDLE_CLIENTS = 10_000

#: Changes that only cost a duplicate run if lost (leases, finished jobs) are
#: committed at least this often (seconds); ACKs force a commit at once.
COMMIT_INTERVAL = 0.05
#: While clients keep sending (the frontend has more to read), ACKs wait for a
#: bigger group commit: a sync costs milliseconds whether it stores 200 jobs or
#: 5,000, so under load one per loop iteration would spend most of the
#: router's time waiting for the disk. They wait at most this long (seconds)
#: and for at most this many uncommitted changes.
COMMIT_GROUP_WAIT = 0.02
COMMIT_GROUP_MAX = 8192


class CommitAcks:
    """Journal commits and the messages they release: ACKs, and what tells of a
    change the journal must hold first."""

    def __init__(
        self,
        book: Book,
        frontend: Channel,
        backend: Channel,
        outbox: Outbox,
        hand_outs: HandOuts,
        lease: LeaseKeeper | None,
        blocked: Callable[[], bool],
    ) -> None:
        """``outbox``: what clients are sent, counted and bounded; ``lease``: the group
        leader's lease checks (None: the SQLite journal); ``blocked``: True while the
        router does not read clients (no ACK then waits for a bigger group)."""
        self.book = book
        self.frontend = frontend
        self.backend = backend
        self.outbox = outbox
        self.hand_outs = hand_outs
        self._lease = lease
        self._blocked = blocked
        #: (client identity, REQUEST or SCHEDULE msgid, packed) to ACK once the journal
        #: is committed; ``packed``: the ACK goes in the form the REQUEST came in.
        #: The list is kept (cleared, never replaced): the frontend holds its ``append``.
        self.acks: list[tuple[bytes, bytes, bool]] = []
        #: Messages to clients that tell of a change the journal must hold first (a
        #: cancelled job's answer, a poisoned job's REJECT): like ACKs, they force a
        #: commit and are sent once it returned.
        self._after_commit: list[tuple[bytes, Message]] = []
        #: The same for job managers (a poisoned job's REJECT to the one that reported it).
        self._after_commit_workers: list[tuple[bytes, Message]] = []
        #: When the journal was last committed (monotonic seconds).
        self._last_commit = 0.0
        #: When ACKs started waiting for a bigger group commit (None: none waits).
        self._acks_since: float | None = None
        #: Clients whose FEATURES said they read bundles: the ACKs one commit
        #: releases to one of them go as one (:meth:`reads_bundles`, :meth:`_send_acks`).
        #: Each with the largest frame it takes (its FEATURES' "bundle" value).
        self._bundle_clients: OrderedDict[bytes, int] = OrderedDict()

    def tell_client(self, identity: bytes, message: Message) -> None:
        """Send ``message`` to a client once the next commit returned."""
        self._after_commit.append((identity, message))

    def tell_set_aside(self, identity: bytes, job_msgid: str, reason: str) -> None:
        """REJECT, after the commit, to the job manager whose report poisoned the job:
        it records the job's end (the router has no database)."""
        worker = self.book.routing.workers.get(identity)
        reject = worker.session.poisoned(job_msgid, reason) if worker is not None else None
        if reject is not None:
            self._after_commit_workers.append((identity, reject))

    def sync(self, *, force: bool = False, now: float | None = None) -> None:
        """Commit the journal if anything waits on it (or it is time), then send the
        hand-outs, ACKs and messages the commit released."""
        journal = self.book.journal
        hand_outs = self.hand_outs
        t = time.monotonic() if now is None else now
        if self.acks and not force and self._group_growing(t):
            return
        if (journal.pending or journal.failure is not None) and (
            self.acks
            or hand_outs.unsent
            or self._after_commit
            or self._after_commit_workers
            or force
            or t - self._last_commit >= COMMIT_INTERVAL
            or journal.pending > 50_000
        ):
            last = self.book.last_seq
            writes = journal.pending
            journal.commit()
            self._last_commit = t
            if writes and not journal.pending and self._lease is not None:
                self._lease.committed()
            if journal.pending:
                # Not written (journal.failure says why; it is retried): nothing
                # that depends on it leaves, neither ACKs nor new jobs' hand-outs.
                hand_outs.pause_leases()
                return
            hand_outs.durable_seq = last
        elif not journal.pending:
            hand_outs.durable_seq = self.book.last_seq
        # The ACKs first: a sender waits for its ACK, a job manager's jobs wait in its
        # prefetch anyway. Both needed only the commit that returned above.
        self._acks_since = None
        if self.acks:
            acks = self.acks[:]
            self.acks.clear()
            self._send_acks(acks)
        if hand_outs.unsent:
            hand_outs.flush()  # the jobs this commit stored
        if hand_outs.leases_paused and not hand_outs.unsent:
            hand_outs.leases_paused.clear()  # those taken back meanwhile get one when sent
        if self._after_commit:
            told, self._after_commit = self._after_commit, []
            for identity, message in told:
                self.outbox.send(identity, message)
        if self._after_commit_workers:
            told, self._after_commit_workers = self._after_commit_workers, []
            for identity, message in told:
                send(self.backend, identity, message)

    def reads_bundles(self, identity: bytes, max_bytes: int) -> None:
        """The client ``identity`` said (in its FEATURES) that it reads bundles of
        at most ``max_bytes`` (the largest frame its socket takes).

        Remembered for the most recent :data:`BUNDLE_CLIENTS` clients: one
        forgotten gets its ACKs one by one again, which it reads as well."""
        clients = self._bundle_clients
        clients[identity] = max_bytes
        clients.move_to_end(identity)
        if len(clients) > BUNDLE_CLIENTS:
            clients.popitem(last=False)

    def _send_acks(self, acks: list[tuple[bytes, bytes, bool]]) -> None:
        """The ACKs of a commit: those of a client that reads bundles as one bundle
        (or as few as the limits allow), sent at once like the others."""
        send_frames = self.outbox.send_frames
        if len(acks) == 1:  # low load: one ACK goes alone, bundle reader or not
            identity, msgid, packed = acks[0]
            send_frames(_alone(identity, ack_frames(new_msgid().encode(), msgid), packed))
            return
        bundled = self._bundle_clients
        grouped: dict[bytes, list[tuple[bytes, bool]]] = {}
        for identity, msgid, packed in acks:
            if identity in bundled:
                grouped.setdefault(identity, []).append((msgid, packed))
            else:
                send_frames(_alone(identity, ack_frames(new_msgid().encode(), msgid), packed))
        for identity, entries in grouped.items():
            limit = bundled[identity]  # the largest frame it takes: never more
            ids = [new_msgid().encode() for _ in entries]
            msgids = [msgid for msgid, _packed in entries]
            # By MAX_BUNDLE_MESSAGES, as runs() would cut them: the common case, each
            # cut fits one bundle, built straight away.
            for cut in range(0, len(entries), MAX_BUNDLE_MESSAGES):
                end = cut + MAX_BUNDLE_MESSAGES
                if len(entries) - cut > 1:
                    frame = ack_bundle(ids[cut:end], msgids[cut:end], max_bytes=limit)
                    if frame is not None:
                        send_frames([identity, frame])
                        continue
                chunk = list(map(ack_frames, ids[cut:end], msgids[cut:end]))
                at = 0
                for taken in runs(chunk, max_bytes=limit):
                    if taken > 1:
                        send_frames([identity, bundle(chunk[at : at + taken])])
                    else:
                        send_frames(_alone(identity, chunk[at], entries[cut + at][1]))
                    at += taken

    def _group_growing(self, now: float) -> bool:
        """True while ACKs may wait for a bigger group commit (see COMMIT_GROUP_WAIT)."""
        if self._acks_since is None:
            self._acks_since = now
        return (
            now - self._acks_since < COMMIT_GROUP_WAIT
            and self.book.journal.pending < COMMIT_GROUP_MAX
            and not self._blocked()
            and self.frontend.poll(0)
        )


def _alone(identity: bytes, ack: list[bytes], packed: bool) -> list[bytes]:
    """An ACK sent alone, in the form its REQUEST came in (packed or not)."""
    return [identity, pack(ack)] if packed else [identity, *ack]
