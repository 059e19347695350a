"""The router's frontend, its schedulers' part: SCHEDULE and UNSCHEDULE from
clients, kept in the journal until a scheduler takes them, and the schedulers'
INFORM, HEARTBEAT and KBAI.

Its handlers are in the frontend's handler table (``Frontend.handlers``); it
owns the connected schedulers (:class:`.routing.Schedulers`).

A SCHEDULE counts as delivered once it is forwarded to a connected scheduler,
which keeps it in its database (it sends no receipt). Until then it waits in
the journal, stored before the client's ACK, so a router crash or restart does
not lose it. An UNSCHEDULE drops the kept SCHEDULEs it names, and is kept
itself for the schedulers' databases.
"""

from __future__ import annotations

import logging

from django_eventmq.protocol import Ack, Inform, Message, Schedule, Unschedule, new_msgid
from django_eventmq.protocol import constants as C
from django_eventmq.protocol.status import CANNOT_STORE_REFUSAL
from django_eventmq.router.book import Book
from django_eventmq.router.commit_acks import CommitAcks
from django_eventmq.router.routing import SchedulerPeer, Schedulers
from django_eventmq.runtime.outbox import WarnOnce, forward, send, show
from django_eventmq.runtime.transport import Channel
from django_eventmq.scheduling.identity import ScheduleSpec

log = logging.getLogger("django_eventmq.router")

#: How a kept message is named in the log (by its ``unschedule`` flag).
_KEPT = {False: C.SCHEDULE, True: C.UNSCHEDULE}

#: Kept SCHEDULE/UNSCHEDULE messages read from the journal at a time.
SCHEDULES_PER_READ = 500


class SchedulerRelay:
    """Schedulers and the messages for them on the frontend."""

    def __init__(
        self,
        book: Book,
        frontend: Channel,
        schedulers: Schedulers,
        commits: CommitAcks,
        warn: WarnOnce,
    ) -> None:
        """``commits``: where a SCHEDULE's ACK waits for the journal commit."""
        self.book = book
        self.frontend = frontend
        self.schedulers = schedulers
        self.commits = commits
        self._warn = warn

    def on_schedule(self, identity: bytes, frames: list[bytes], msg: Message, now: float) -> None:
        assert isinstance(msg, Schedule | Unschedule)
        unschedule = isinstance(msg, Unschedule)
        job_key, timing_key = _schedule_keys(msg)
        journal = self.book.journal
        if journal.failure is not None:
            self.book.reject(identity, msg.msgid, cannot_store(journal.failure))
            return
        peers = self.schedulers
        # Kept ones go first, so a scheduler sees the messages in the order sent (a
        # kept SCHEDULE this UNSCHEDULE names, then the UNSCHEDULE: unscheduled).
        self._flush_schedules(now)
        if peers.stored or not self._to_schedulers(unschedule, frames, now):
            dropped = 0
            if unschedule and peers.stored and job_key:
                # Kept, it drops the kept SCHEDULEs it names in the same write.
                dropped = journal.keep_unschedule(frames, job_key, timing_key)
            else:
                journal.add_schedule(
                    frames, unschedule=unschedule, job_key=job_key, timing_key=timing_key
                )
            peers.stored += 1 - dropped
            if dropped:
                log.info("UNSCHEDULE %s dropped %d kept SCHEDULE(s)", msg.msgid, dropped)
            log.debug("no scheduler took %s %s: kept in the journal", msg.command, msg.msgid)
        # The ACK goes once the journal is committed.
        self.commits.acks.append((identity, msg.msgid.encode(), False))

    def recover(self) -> None:
        """On start: count the SCHEDULE / UNSCHEDULE messages the journal keeps."""
        self.schedulers.stored = self.book.journal.schedule_count()
        if self.schedulers.stored:
            log.warning(
                "journal: %d SCHEDULE/UNSCHEDULE message(s) wait for a scheduler",
                self.schedulers.stored,
            )

    def _flush_schedules(self, now: float) -> None:
        """Hand kept messages to the connected schedulers, oldest first."""
        peers = self.schedulers
        journal = self.book.journal
        if not peers.stored or not peers.peers or journal.failure is not None:
            return
        while peers.stored:
            kept = journal.schedules(SCHEDULES_PER_READ)
            for seq, unschedule, frames in kept:
                if not self._to_schedulers(unschedule, frames, now):
                    return
                journal.delete_schedule(seq)
                peers.stored -= 1
                log.debug("kept %s #%d handed to a scheduler", _KEPT[unschedule], seq)
            if len(kept) < SCHEDULES_PER_READ:
                peers.stored = 0  # the journal has no more (the count was off)
                return

    def _to_schedulers(self, broadcast: bool, frames: list[bytes], now: float) -> bool:
        """SCHEDULE to one scheduler (round robin), UNSCHEDULE to all; False if none took it."""
        peers = self.schedulers
        if broadcast:
            sent = [self._forward_to_scheduler(s, frames, now) for s in list(peers.peers.values())]
            return any(sent)
        for _ in range(len(peers.peers)):
            scheduler = peers.next()
            if scheduler is not None and self._forward_to_scheduler(scheduler, frames, now):
                return True
        return False

    def _forward_to_scheduler(
        self, scheduler: SchedulerPeer, frames: list[bytes], now: float
    ) -> bool:
        if forward(self.frontend, scheduler.identity, frames):
            scheduler.last_sent = now
            return True
        return False

    def on_inform(self, identity: bytes, frames: list[bytes], msg: Message, now: float) -> None:
        assert isinstance(msg, Inform)
        if msg.peer_type != C.PEER_SCHEDULER:
            self._warn("frontend", identity, "worker INFORM on the frontend (use the backend)")
            return
        if self.schedulers.add(identity, now):
            log.info("scheduler %s connected", show(identity))
        send(self.frontend, identity, Ack(msgid=new_msgid(), ack_msgid=msg.msgid))
        self._flush_schedules(now)

    def on_heartbeat(self, identity: bytes, frames: list[bytes], msg: Message, now: float) -> None:
        if identity not in self.schedulers.peers:
            # Only a scheduler sends HEARTBEAT here, and only after its INFORM: this
            # one was dropped, or this router restarted since. It is taken back as
            # its INFORM would take it (it waits for no ACK). DISCONNECT, the spec's
            # way to make a peer INFORM again, would do for ours but makes the
            # reference scheduler exit.
            self.schedulers.add(identity, now)
            log.warning(
                "scheduler %s registered again: a HEARTBEAT without INFORM "
                "(dropped earlier, or this router restarted)",
                show(identity),
            )
        self._flush_schedules(now)  # kept messages; a retry, should a send have failed

    def on_kbai(self, identity: bytes, frames: list[bytes], msg: Message, now: float) -> None:
        if self.schedulers.remove(identity):
            log.info("scheduler %s said goodbye", show(identity))


def cannot_store(failure: str) -> str:
    """The REJECT reason while the journal cannot be written."""
    return f"{CANNOT_STORE_REFUSAL} (its journal: {failure}); send it again later"


def _schedule_keys(msg: Schedule | Unschedule) -> tuple[str, str]:
    """The job's and the timing's identity, as a scheduler matches them ('' if unreadable)."""
    try:
        spec = ScheduleSpec.from_message(msg)
    except Exception:  # the keys only let an UNSCHEDULE drop kept SCHEDULEs early
        log.debug("%s %s: body or timing unreadable, kept as it is", msg.command, msg.msgid)
        return "", ""
    return spec.job_key, (spec.key if spec.timing is not None else "")
