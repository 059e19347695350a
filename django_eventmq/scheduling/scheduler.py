"""The scheduler process: keeps schedules in a store and fires REQUESTs when they are due.

It connects a DEALER to the router's frontend, announces itself with
``INFORM(peer_type="scheduler")``, heartbeats, takes SCHEDULE/UNSCHEDULE from
the router (spec and reference frame forms) and sends ordinary REQUESTs with
``reply-requested`` (as the reference does) when a schedule is due.

The database (:class:`ScheduleDatabase`) is the source of truth, so a restarted
scheduler resumes where the last one stopped, an edit made elsewhere (the
Django admin) reaches a running scheduler at its next poll, and several
schedulers can share one database: each run is *claimed* in it before it
is sent, and only the scheduler whose claim succeeds sends it. Runs are only
fired while the router is reachable; runs that fell due meanwhile follow the
catch-up policy (:mod:`.schedules`). It is also the outbox's relay
(:mod:`.relay`): it sends the outbox rows their process did not. Never
imports Django.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Protocol, TypeVar

from django_eventmq.errors import EventMQError, ProtocolError
from django_eventmq.protocol import (
    Ack,
    Disconnect,
    Headers,
    Heartbeat,
    Inform,
    Kbai,
    Message,
    Reject,
    Reply,
    Request,
    Schedule,
    Unschedule,
    new_msgid,
)
from django_eventmq.protocol import constants as C
from django_eventmq.protocol.codec import describe
from django_eventmq.protocol.heartbeat import Liveness
from django_eventmq.protocol.unique import holder_of
from django_eventmq.runtime import security, transport
from django_eventmq.runtime.addresses import AddressCycle, parse_groups
from django_eventmq.runtime.service import Service
from django_eventmq.runtime.settings import Settings
from django_eventmq.runtime.waitlog import RouterWait
from django_eventmq.scheduling.expiry import ResultExpiry
from django_eventmq.scheduling.identity import ScheduleSpec
from django_eventmq.scheduling.relay import OutboxRelay, OutboxStore
from django_eventmq.scheduling.timing import CATCHUP_POLICIES, DuePlan, Timing, plan_due

logger = logging.getLogger("django_eventmq.scheduler")

T = TypeVar("T")

#: First reconnect delay (seconds); it doubles up to RECONNECT_MAX_DELAY.
RECONNECT_MIN_DELAY = 0.1
#: Seconds between two looks at whether the connection dropped (several addresses).
PEER_CHECK_EVERY = 0.1
#: Longest the loop blocks, so a stop request is seen quickly.
MAX_WAIT = 0.25
#: HEARTBEAT_TIMEOUTs without a HEARTBEAT (while other messages come) after which
#: the router is taken to have forgotten us. A router that forgot us stays so, so
#: waiting longer costs little; a router that is only late (a long journal commit,
#: one slow turn of its loop) gets a whole timeout more.
FORGOTTEN_AFTER = 2


@dataclass(slots=True)
class ScheduleState:
    """One enabled schedule as the scheduler sees it."""

    id: int
    queue: str
    headers: Headers
    body_text: str
    timing: Timing
    next_run: datetime | None
    runs_left: int | None = None
    revision: int = 0
    name: str = ""

    def request(self, msgid: str) -> Request:
        """The REQUEST a run sends (reply requested, like the reference)."""
        return Request(
            msgid=msgid,
            queue=self.queue,
            headers=self.headers.with_(reply_requested=True),
            body_text=self.body_text,
        )


class ScheduleDatabase(Protocol):
    """What the scheduler keeps in its database: schedules, claimed runs, results to
    expire (the Django ORM in ``django_eventmq.schedule_database``). Not the router
    journal's kept SCHEDULE messages (``router/journal/schedules.py``)."""

    def versions(self) -> dict[int, int]:
        """``{id: revision}`` of every enabled schedule; a revision changes on every edit."""
        ...

    def load(self, ids: Collection[int]) -> list[ScheduleState]:
        """The enabled schedules among ``ids``."""
        ...

    def upsert(self, spec: ScheduleSpec, now: datetime) -> ScheduleState | None:
        """Create or update the schedule of a SCHEDULE; its state, or None if disabled."""
        ...

    def remove(self, spec: ScheduleSpec) -> int:
        """Remove what an UNSCHEDULE names (every schedule of the job without timing)."""
        ...

    def claim(self, schedule_id: int, fire_time: datetime, msgid: str, claimed_by: str) -> bool:
        """Reserve the run of ``schedule_id`` at ``fire_time``; False if it was already taken."""
        ...

    def record_fire(
        self,
        state: ScheduleState,
        fired: Sequence[tuple[datetime, str]],
        plan: DuePlan,
        now: datetime,
    ) -> None:
        """Save the runs sent (``(fire_time, msgid)``) and the plan's next run / runs left."""
        ...

    def record_result(self, msgid: str, payload: str) -> None:
        """Remember a run's REPLY payload, if the router forwards one."""
        ...

    def prune(self, before: datetime) -> int:
        """Forget claims of runs fired before ``before``."""
        ...

    def expire_results(self, before: datetime, batch: int) -> int:
        """Delete up to ``batch`` finished job results, and as many finished
        workflows, last written before ``before``; how many rows went."""
        ...


class Scheduler(Service):
    """Fires due schedules as REQUESTs; drive it with :meth:`run` or :meth:`loop_once`."""

    label = "scheduler"
    log = logger

    def __init__(
        self,
        settings: Settings,
        store: ScheduleDatabase,
        *,
        catchup: str | None = None,
        poll_interval: float | None = None,
        grace: float | None = None,
        retention: float | None = None,
        outbox: OutboxStore | None = None,
    ) -> None:
        super().__init__()
        self.settings = settings
        self.store = store
        self.catchup = catchup or settings.scheduler_catchup
        if self.catchup not in CATCHUP_POLICIES:
            raise ValueError(f"SCHEDULER_CATCHUP must be one of {CATCHUP_POLICIES}")
        self.poll_interval = (
            settings.scheduler_poll_interval if poll_interval is None else poll_interval
        )
        self.grace = settings.scheduler_misfire_grace if grace is None else grace
        self.retention = settings.scheduler_run_retention if retention is None else retention
        #: Sends the outbox rows their own process did not (None: no outbox table).
        self.relay = (
            None
            if outbox is None
            else OutboxRelay(
                outbox,
                after=settings.outbox_relay_after,
                every=min(self.poll_interval, 1.0),
                resend=settings.ack_timeout,
            )
        )
        #: Finished results older than RESULT_EXPIRES, deleted a batch at a time.
        self.expiry = ResultExpiry(settings.result_expires)
        self.name = transport.new_identity("scheduler-").decode()
        # A client of the router's frontend: CURVE keys when the settings have
        # them. Built now so a bad key setting fails at start-up.
        self._options = security.secure_channel_options(
            settings, security.FRONTEND, security.CLIENT
        )
        self.schedules: dict[int, ScheduleState] = {}
        self.channel: transport.Channel | None = None
        self.acked = False
        self.liveness: Liveness | None = None
        #: When the router last sent what it sends only to a scheduler it knows
        #: (HEARTBEAT, SCHEDULE, UNSCHEDULE, the ACK of our INFORM); monotonic.
        self._known_at = 0.0
        self._inform_id = ""
        self._inform_sent = 0.0
        self._reconnect_at = 0.0
        self._reconnect_delay = RECONNECT_MIN_DELAY
        #: ``BROKER_ADDR``: one router, or the members of a group, talked to one at a
        #: time (a DEALER connected to two live routers would share our messages).
        #: Several groups (shards): a scheduler serves the first. The store is shared,
        #: so each group's SCHEDULEs (clients send them to the group of their queue)
        #: reach it through a scheduler whose BROKER_ADDR names that group, and any
        #: of them fires a run (claimed once) into its own group.
        groups = parse_groups(settings.broker_addr, "BROKER_ADDR")
        self.addresses = AddressCycle(groups[0])
        if len(groups) > 1:
            logger.info(
                "scheduler: BROKER_ADDR names %d router groups; this scheduler serves the "
                "first (%s): run one scheduler per group (BROKER_ADDR=that group's members) "
                "to take the schedules sent to each",
                len(groups),
                ",".join(groups[0]),
            )
        self._next_peer_check = 0.0
        self.waiting = RouterWait(logger, "scheduler", self.addresses.label)
        self._refreshed_at = -1e18
        self._pruned_at = -1e18
        self._stores_failing: set[str] = set()
        self.sent = 0

    # -- lifecycle (run() and stop() come from Service) ----------------------
    def start(self) -> None:
        """Log the ready line; the first turn connects (and later turns reconnect)."""
        logger.info("scheduler ready: broker=%s", self.addresses.label)

    def close(self) -> None:
        """Say goodbye (KBAI) to a router that knows us, then drop the socket."""
        if self.channel is not None and self.acked:
            with contextlib.suppress(transport.ZMQError):
                self.channel.send(Kbai(msgid=new_msgid()), flags=transport.NOBLOCK)
        self._disconnect()

    def _disconnect(self) -> None:
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        self.acked = False

    @property
    def connected(self) -> bool:
        """True while the router has acknowledged us and is heard from."""
        return self.channel is not None and self.acked

    # -- one turn -----------------------------------------------------------
    def loop_once(self, now: datetime | None = None, timeout: float | None = None) -> None:
        """One iteration: connect, read messages, heartbeat, reload, fire what is due.

        ``now`` (aware) is the wall-clock time for schedule maths; ``timeout``
        is how long to wait for a message (default: until something is due,
        at most a fraction of a second). Tests pass both.
        """
        mono = time.monotonic()
        if self.channel is None and mono >= self._reconnect_at:
            self._connect(mono)
        wait = self._wait_time(now, mono) if timeout is None else timeout
        if self.channel is None:
            time.sleep(min(wait, max(0.0, self._reconnect_at - mono)))
        else:
            self._read(wait, now)
        mono = time.monotonic()
        self._keepalive(mono)
        if mono - self._refreshed_at >= self.poll_interval:
            self._guarded(self.refresh)
            self._refreshed_at = mono
        current = now or datetime.now(UTC)
        if self.connected:
            self._guarded(lambda: self.fire_due(current))
        if self.relay is not None:
            relay, send = self.relay, self._send if self.connected else None
            self._guarded(lambda: relay.turn(send, current, mono), "outbox table")
        if mono - self._pruned_at >= 3600:
            self._pruned_at = mono
            self._guarded(lambda: self.store.prune(current - timedelta(seconds=self.retention)))
        self._guarded(lambda: self.expiry.turn(mono, current, self.store.expire_results))

    def _wait_time(self, now: datetime | None, mono: float) -> float:
        wait = min(MAX_WAIT, max(0.0, self._refreshed_at + self.poll_interval - mono))
        wait = min(wait, self.expiry.wait(mono))
        if self.connected:
            current = now or datetime.now(UTC)
            for state in self.schedules.values():
                if state.next_run is not None:
                    wait = min(wait, max(0.0, (state.next_run - current).total_seconds()))
        return wait

    # -- connection ---------------------------------------------------------
    def _connect(self, mono: float) -> None:
        self._disconnect()
        self.channel = transport.Channel(
            transport.DEALER,
            connect=self.addresses.current,
            identity=self.name.encode(),
            options=self._options,
            watch_peer=self.addresses.several,
        )
        if not self._inform(mono):
            return
        self.liveness = Liveness(
            now=mono,
            interval=self.settings.heartbeat_interval,
            timeout=self.settings.heartbeat_timeout,
        )
        logger.debug("scheduler: INFORM sent to %s", self.addresses.current)

    def _inform(self, mono: float) -> bool:
        """Send INFORM; False (the connection dropped, tried again later) if it cannot go."""
        assert self.channel is not None
        self._inform_id = new_msgid()
        if not self._send_now(Inform(msgid=self._inform_id, peer_type=C.PEER_SCHEDULER)):
            return False
        self._inform_sent = mono
        return True

    def _send_now(self, message: Message) -> bool:
        """Send without waiting; False, and the connection dropped, if the socket has
        no connection to queue it for (a refused CURVE handshake can leave it so: a
        send would then wait for ever)."""
        assert self.channel is not None
        try:
            self.channel.send(message, flags=transport.NOBLOCK)
        except transport.Again:
            self._lost(
                f"router at {self.addresses.current} takes no message (no connection: "
                "is it up, and does it take our CURVE key?)"
            )
            return False
        return True

    def _lost(self, why: str) -> None:
        """Drop the connection and try again (the next address, if several) after a
        growing delay."""
        mono = time.monotonic()
        lost = self.addresses.current
        nxt = self.addresses.advance()
        if self.acked:
            logger.warning("scheduler: %s (%s); reconnecting to %s", why, lost, nxt)
            self.waiting.lost(mono)
        else:
            logger.debug("scheduler: %s", why)
            self.waiting.no_answer(mono)
        self._disconnect()
        self._reconnect_at = mono + self._reconnect_delay
        self._reconnect_delay = min(self._reconnect_delay * 2, self.settings.reconnect_max_delay)

    def _keepalive(self, mono: float) -> None:
        if self.channel is None or self.liveness is None:
            return
        if self.addresses.several and mono >= self._next_peer_check:
            # Another address may have a router up: do not wait for timeouts here.
            self._next_peer_check = mono + PEER_CHECK_EVERY
            why = self.channel.unreachable()
            if why:
                self._lost(f"router at {self.addresses.current}: {why}")
                return
        if not self.acked:
            if mono - self._inform_sent > self.addresses.handshake_wait(
                self.settings.heartbeat_timeout
            ):
                self._lost("no ACK for INFORM")
            return
        if self.liveness.expired(mono):
            self._lost("router silent for longer than HEARTBEAT_TIMEOUT")
            return
        forgotten = FORGOTTEN_AFTER * self.settings.heartbeat_timeout
        if mono - self._known_at > forgotten:
            # Alive (it ACKs our REQUESTs) but it stopped heartbeating us, as a
            # router does for a scheduler it dropped or never met (it restarted)
            # and did not take back on our HEARTBEAT (the reference router does not).
            # INFORM again on this connection: nothing queued is dropped, and a
            # router that still knows us (ours, only late) takes it as a refresh.
            logger.warning(
                "scheduler: the router answers but sent no HEARTBEAT for %ss "
                "(it forgot this scheduler?): INFORM again",
                forgotten,
            )
            if self._inform(mono):
                self._known_at = mono  # one more window for its ACK
            return
        if self.liveness.due(mono):
            if not self._send_now(Heartbeat(msgid=new_msgid(), timestamp=time.time())):
                return
            # Only a HEARTBEAT counts as sent, unlike the spec's rule (REQUESTs are
            # not HEARTBEATs): a REQUEST looks like any client's, so a router that
            # forgot us (it dropped us, or restarted) knows us again only by a
            # HEARTBEAT. A scheduler firing every second would send none. The
            # reference scheduler also sends one every interval, whatever it fires.
            self.liveness.sent(mono)

    def _send(self, message: Message) -> None:
        assert self.channel is not None
        self.channel.send(message)

    # -- incoming -----------------------------------------------------------
    def _read(self, wait: float, now: datetime | None) -> None:
        assert self.channel is not None
        timeout_ms = int(wait * 1000)
        while self.channel is not None and self.channel.poll(timeout_ms):
            timeout_ms = 0
            try:
                _identity, _frames, message = self.channel.recv()
            except ProtocolError as exc:
                logger.warning("scheduler: dropped a malformed message: %s", exc)
                continue
            mono = time.monotonic()
            if self.liveness is not None:
                self.liveness.heard(mono)
            if isinstance(message, Heartbeat | Schedule | Unschedule):
                self._known_at = mono
            self.handle(message, now)

    def handle(self, message: Message, now: datetime | None = None) -> None:
        """React to one message from the router (``now``: controlled time for tests)."""
        if isinstance(message, Ack):
            if self.relay is not None and self.relay.acked(message.ack_msgid):
                return
            if message.ack_msgid != self._inform_id:
                return  # a REQUEST's: the liveness already heard it
            self._known_at = time.monotonic()
            if self.acked:  # our INFORM again on this connection
                logger.info("scheduler: registered again with %s", self.addresses.current)
            else:
                self.acked = True
                self._reconnect_delay = RECONNECT_MIN_DELAY
                self.waiting.connected()
                logger.debug("scheduler: registered with %s", self.addresses.current)
        elif isinstance(message, Schedule | Unschedule):
            self._on_schedule(message, now or datetime.now(UTC))
        elif isinstance(message, Reply):
            if message.reply_to is not None:
                self._guarded(
                    lambda: self.store.record_result(message.reply_to or "", message.payload)
                )
        elif isinstance(message, Reject):
            if self.relay is None or not self.relay.refused(message.job_msgid, message.reason):
                _refused(message)
        elif isinstance(message, Disconnect):
            self._send_now(Kbai(msgid=new_msgid()))
            if self.channel is not None:
                self._lost("router sent DISCONNECT")
        elif isinstance(message, Kbai):
            self._lost("router said goodbye")
        elif not isinstance(message, Heartbeat):
            logger.warning(
                "scheduler: ignored unexpected %s (msgid %s)", message.command, message.msgid
            )

    def _on_schedule(self, message: Schedule | Unschedule, now: datetime) -> None:
        try:
            spec = ScheduleSpec.from_message(message)
        except (EventMQError, ValueError) as exc:
            logger.warning(
                "scheduler: refused %s msgid %s queue %s: %s (body %s)",
                message.command,
                message.msgid,
                message.queue,
                exc,
                describe(message.body_text.encode()),
            )
            return
        if isinstance(message, Unschedule):
            removed = self._guarded(lambda: self.store.remove(spec))
            logger.debug(
                "scheduler: UNSCHEDULE %s (msgid %s) removed %s",
                spec.body.name,
                message.msgid,
                removed,
            )
            self._refreshed_at = -1e18  # drop the removed ones at once
            return
        state = self._guarded(lambda: self.store.upsert(spec, now))
        if state is not None:
            self.schedules[state.id] = state
        logger.debug("scheduler: SCHEDULE %s (msgid %s) stored", spec.body.name, message.msgid)

    # -- the store ----------------------------------------------------------
    def _guarded(self, action: Callable[[], T], store: str = "schedule store") -> T | None:
        """Run a call of ``store``; a failing store is logged once and retried next turn.
        Each store is said apart: one failing does not make the other's calls flap."""
        try:
            result = action()
        except transport.ContextTerminated:
            raise
        except Exception as exc:
            if store not in self._stores_failing:
                logger.warning("scheduler: %s failed: %s: %s", store, type(exc).__name__, exc)
            self._stores_failing.add(store)
            return None
        if store in self._stores_failing:
            logger.warning("scheduler: %s works again", store)
            self._stores_failing.discard(store)
        return result

    def refresh(self) -> None:
        """Bring the cached schedules up to date with the store (edits, new, removed)."""
        versions = self.store.versions()
        for gone in set(self.schedules) - set(versions):
            del self.schedules[gone]
        stale = [
            sid
            for sid, revision in versions.items()
            if sid not in self.schedules or self.schedules[sid].revision != revision
        ]
        if stale:
            for sid in stale:
                self.schedules.pop(sid, None)
            for state in self.store.load(stale):
                self.schedules[state.id] = state

    # -- firing -------------------------------------------------------------
    def fire_due(self, now: datetime) -> int:
        """Claim and send every run due at ``now``; returns how many were sent."""
        sent = 0
        for state in list(self.schedules.values()):
            if state.next_run is None or state.next_run > now:
                continue
            plan = plan_due(
                state.timing,
                state.next_run,
                now,
                policy=self.catchup,
                grace=self.grace,
                runs_left=state.runs_left,
            )
            fired: list[tuple[datetime, str]] = []
            for fire_time in plan.fire_times:
                msgid = new_msgid()
                if not self.store.claim(state.id, fire_time, msgid, self.name):
                    continue  # another scheduler has this run
                self._send(state.request(msgid))
                fired.append((fire_time, msgid))
                logger.debug(
                    "scheduler: fired %s queue %s msgid %s for %s",
                    state.name or state.id,
                    state.queue,
                    msgid,
                    fire_time.isoformat(),
                )
            if plan.missed:
                logger.info(
                    "scheduler: schedule %s: %d late run(s) not fired (catch-up policy %s)",
                    state.name or state.id,
                    plan.missed,
                    self.catchup,
                )
            if fired or not plan.fire_times:
                self.store.record_fire(state, fired, plan, now)
            sent += len(fired)
            # Until the store says otherwise (next refresh), move on locally.
            if plan.finished:
                self.schedules.pop(state.id, None)
            else:
                self.schedules[state.id] = replace(
                    state, next_run=plan.next_run, runs_left=plan.runs_left, revision=-1
                )
        self.sent += sent
        return sent


def _refused(message: Reject) -> None:
    """The router refused a run: logged once, not sent again (the next run comes at its
    time). A unique job's run is refused while the previous run still holds its key."""
    holder = holder_of(message.reason)
    if holder is not None:
        logger.info(
            "scheduler: run msgid %s skipped: the previous run (msgid %s) still holds the "
            "job's unique key",
            message.job_msgid,
            holder,
        )
    else:
        logger.warning(
            "scheduler: the router refused run msgid %s: %s", message.job_msgid, message.reason
        )
