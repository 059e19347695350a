"""The router (broker): clients and schedulers on the frontend, job managers on
the backend, administration on a third socket.

The router forwards raw frames and never parses job bodies; a job's life
(stored, handed out, finished, handed out again) lives in :mod:`.dispatch`,
routing decisions in :mod:`.queues`, the store in :mod:`.journal`.

One loop iteration: take what the sockets have, hand jobs out at once, then
commit the journal (group commit: one sync for everything the iteration
changed) and only then send the ACKs of the REQUESTs it accepted. Sends never
block: a peer whose pipe is full or that is gone costs us one message (a
heartbeat, an ACK the client will ask for again) or puts a REQUEST back to
the front of its queue, never the router itself.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable

from ..errors import ProtocolError
from ..protocol import (
    Ack,
    AdminRequest,
    Cancel,
    Disconnect,
    Done,
    Features,
    Heartbeat,
    Inform,
    Kbai,
    Message,
    Nack,
    Ready,
    Reply,
    Request,
    Schedule,
    Unschedule,
    decode,
    new_msgid,
    parse_headers,
)
from ..protocol import constants as C
from ..protocol.headers import Headers
from . import router_admin as admin_json
from . import transport
from .dispatch import Book
from .journal import MEMORY, Journal, resolve_path
from .queues import Job, Routing, Scheduler, Schedulers, Worker
from .router_io import MEMORY as WARN_MEMORY
from .router_io import WarnOnce, forward, send, show
from .settings import Settings
from .transport import Channel

log = logging.getLogger("django_eventmq.router")

#: Messages taken from one socket per loop iteration, so no socket starves the others.
DRAIN_CAP = 256
#: Poll timeout (ms) while a REQUEST waits to be re-sent after a full pipe.
RETRY_MS = 10
#: Messages queued per peer before a send to it fails with ``Again`` (bounds memory
#: when a client never reads its ACKs).
SNDHWM = 100_000
#: Changes that only cost a duplicate run if lost (leases, finished jobs) are
#: committed at least this often (seconds); ACKs force a commit at once.
COMMIT_INTERVAL = 0.05
#: What our router tells a job manager it speaks, right after the ACK of its INFORM.
FEATURES = {"cancel": 1, "delay": 1, "done": 1, "nack": 1, "priority": 1, "reject": 1}

_VERSION = C.PROTOCOL_VERSION_B
_REQUEST = C.REQUEST.encode()
_READY = C.READY.encode()
_DONE = b"DONE"
_ACK = C.ACK.encode()

Handler = Callable[[bytes, list[bytes], Message, float], None]


class Router:
    """The eMQP/1.0 router. ``run()`` in its own thread or process; ``stop()`` from anywhere."""

    #: The bound sockets, made by :meth:`start`.
    frontend: Channel
    backend: Channel
    admin: Channel
    #: Every job held, made by :meth:`start` (it needs the journal).
    book: Book

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.schedulers = Schedulers()
        self.frontend_address = ""
        self.backend_address = ""
        self.admin_address = ""
        self.journal_path = ""
        self._stopping = False
        self._retry = False
        self._blocked = False
        self._next_tick = 0.0
        self._last_commit = 0.0
        self._tick = settings.heartbeat_interval / 4
        self._warn = WarnOnce()
        #: (client identity, REQUEST msgid) to ACK once the journal is committed.
        self._acks: list[tuple[bytes, bytes]] = []
        #: Workers that said KBAI: their late messages are expected, not an error.
        self._departed: OrderedDict[bytes, None] = OrderedDict()
        #: Unknown backend peers we told to DISCONNECT, and when.
        self._told: OrderedDict[bytes, float] = OrderedDict()
        self._channels: list[Channel] = []
        self._poller: transport.Poller | None = None
        self._handlers: dict[Channel, tuple[str, bool, dict[type, Handler]]] = {}

    @property
    def routing(self) -> Routing:
        return self.book.routing

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> None:
        """Bind the three sockets, open the journal and log the ready line."""
        if self._poller is not None:
            return
        s = self.settings
        try:
            self.frontend = self._bind(s.frontend_addr)
            self.backend = self._bind(s.backend_addr)
            self.admin = self._bind(s.admin_addr)
            self.frontend_address = self.frontend.address
            self.backend_address = self.backend.address
            self.admin_address = self.admin.address
            self.journal_path = (
                resolve_path(s.journal_path, self.frontend_address) if s.journal else MEMORY
            )
            journal = Journal(self.journal_path, sync=s.journal_sync)
        except BaseException:
            self.close()
            raise
        self.book = Book(s, journal, self._deliver, self._to_client)
        self.book.recover()
        self._handlers = {
            self.frontend: ("frontend", False, self._frontend_handlers()),
            self.backend: ("backend", False, self._backend_handlers()),
            self.admin: ("admin", True, self._admin_handlers()),
        }
        self._poller = transport.Poller(*self._channels)
        log.info(
            "router ready: frontend=%s backend=%s admin=%s",
            self.frontend_address,
            self.backend_address,
            self.admin_address,
        )
        if s.journal:
            log.info("journal: %s (sync %s)", self.journal_path, s.journal_sync)

    def _bind(self, addr: str) -> Channel:
        channel = Channel(transport.ROUTER, bind=addr, hwm=SNDHWM)
        self._channels.append(channel)
        return channel

    def run(self) -> None:
        """Start, then route until :meth:`stop` (or admin DISCONNECT); sockets closed on exit."""
        try:
            self.start()
            while not self._stopping:
                self.loop_once()
        except transport.ContextTerminated:
            log.info("router stopping: context terminated")
        finally:
            self.close()

    def stop(self) -> None:
        """Ask the loop to stop. Only sets a flag: safe from signal handlers and threads."""
        self._stopping = True

    @property
    def stopping(self) -> bool:
        return self._stopping

    def close(self) -> None:
        """Commit the journal, send what waited on it, close sockets and journal (idempotent)."""
        book = getattr(self, "book", None)
        if book is not None and self._channels:
            with contextlib.suppress(Exception):
                self._sync(force=True)
        for channel in self._channels:
            channel.close()
        self._channels.clear()
        self._poller = None
        if book is not None:
            journal = book.journal
            empty = journal.path != MEMORY and journal.is_empty()
            journal.close()
            if empty and "{frontend}" in self.settings.journal_path:
                # A per-address default journal with nothing in it: leave no litter.
                for suffix in ("", "-wal", "-shm", ".lock"):
                    with contextlib.suppress(OSError):
                        os.unlink(journal.path + suffix)

    def loop_once(self, timeout_ms: int = 100, now: float | None = None) -> None:
        """Wait up to ``timeout_ms`` for messages, handle all that are ready, do any
        timed work that is due, then commit the journal and send the ACKs."""
        if self._poller is None:
            self.start()
        assert self._poller is not None
        timeout_ms = min(timeout_ms, max(1, int(self._tick * 1000)))
        if self._retry:
            timeout_ms = min(timeout_ms, RETRY_MS)
        due = self.book.next_due()
        if due is not None:
            timeout_ms = max(0, min(timeout_ms, int((due - time.time()) * 1000) + 1))
        ready = self._poller.poll(timeout_ms)
        t = time.monotonic() if now is None else now
        for channel in ready:
            if channel is self.frontend:
                self._drain_frontend(t)
            elif channel is self.backend:
                self._drain_backend(t)
            else:
                self._drain(channel, t)
        if self._retry:
            self._retry = False
            self.book.pump(t)
        self.book.promote_due(time.time(), t)
        if t >= self._next_tick:
            self._next_tick = t + self._tick
            self._housekeeping(t)
        self._sync(now=t)
        self._check_high_water()

    # -- the journal and the ACKs waiting for it ----------------------------------
    def _sync(self, *, force: bool = False, now: float | None = None) -> None:
        journal = self.book.journal
        t = time.monotonic() if now is None else now
        if journal.pending and (
            self._acks
            or force
            or t - self._last_commit >= COMMIT_INTERVAL
            or journal.pending > 50_000
        ):
            journal.commit()
            self._last_commit = t
        if self._acks:
            acks, self._acks = self._acks, []
            sock = self.frontend
            for identity, msgid in acks:
                frames = [identity, b"", _VERSION, _ACK, new_msgid().encode(), msgid]
                try:
                    sock.send_frames(frames, flags=transport.NOBLOCK)
                except transport.Again:
                    log.debug("ACK to %s dropped: its pipe is full", show(identity))
                except transport.ZMQError as exc:
                    if exc.errno != transport.EHOSTUNREACH:
                        raise
                    log.debug("ACK to %s dropped: peer is gone", show(identity))

    # -- back-pressure -----------------------------------------------------------------
    def _over_high_water(self) -> bool:
        return self.book.backlog() >= self.settings.high_water_mark

    def _check_high_water(self) -> None:
        """Policy ``block``: stop reading clients above the mark, start again below 90%."""
        if self.settings.hwm_policy != "block" or self._poller is None:
            return
        backlog = self.book.backlog()
        mark = self.settings.high_water_mark
        if not self._blocked and backlog >= mark:
            self._blocked = True
            self._poller.unregister(self.frontend)
            log.warning(
                "high-water mark reached (%d jobs waiting): not reading clients until below %d",
                backlog,
                self._low_water(),
            )
        elif self._blocked and backlog < self._low_water():
            self._blocked = False
            self._poller.register(self.frontend)
            log.warning(
                "below the high-water mark again (%d jobs waiting): reading clients", backlog
            )

    def _low_water(self) -> int:
        mark = self.settings.high_water_mark
        return max(1, min(mark - 1, int(mark * 0.9)))

    @property
    def blocked(self) -> bool:
        """True while clients are not read (high-water mark, policy ``block``)."""
        return self._blocked

    # -- receiving -------------------------------------------------------------
    def _drain_frontend(self, now: float) -> None:
        """Like :meth:`_drain`, with REQUESTs taken straight from their frames."""
        recv = self.frontend.recv_frames
        block = self.settings.hwm_policy == "block"
        for _ in range(DRAIN_CAP):
            if block and self._over_high_water():
                return
            try:
                raw = recv(flags=transport.NOBLOCK)
            except transport.Again:
                return
            if (
                len(raw) == 8
                and raw[3] == _REQUEST
                and raw[1] == b""
                and raw[2] == _VERSION
                and self._fast_request(raw, now)
            ):
                continue
            self._handle(self.frontend, raw, now)

    def _drain_backend(self, now: float) -> None:
        """Like :meth:`_drain`, with READY and DONE taken straight from their frames."""
        recv = self.backend.recv_frames
        for _ in range(DRAIN_CAP):
            try:
                raw = recv(flags=transport.NOBLOCK)
            except transport.Again:
                return
            if raw[1:3] == [b"", _VERSION] and len(raw) >= 5:
                command = raw[3]
                if command == _READY and len(raw) == 5 and self._fast_ready(raw[0], now):
                    continue
                if command == _DONE and len(raw) == 8 and self._fast_done(raw, now):
                    continue
            self._handle(self.backend, raw, now)

    def _drain(self, channel: Channel, now: float) -> None:
        for _ in range(DRAIN_CAP):
            try:
                raw = channel.recv_frames(flags=transport.NOBLOCK)
            except transport.Again:
                return
            self._handle(channel, raw, now)

    def _handle(self, channel: Channel, raw: list[bytes], now: float) -> None:
        """Decode one message and call its handler; bad input is logged once."""
        name, admin_socket, handlers = self._handlers[channel]
        identity = raw[0]
        frames = raw[1:]
        try:
            if len(raw) < 2:
                raise ProtocolError(f"expected an identity and a message, got {len(raw)} frame(s)")
            message = decode(frames, admin=admin_socket)
        except ProtocolError as exc:
            self._warn(name, identity, exc.reason, "dropped malformed message")
            return
        handler = handlers.get(type(message))
        if handler is None:
            self._warn(name, identity, f"unexpected command {message.command or 'admin'}")
            return
        try:
            handler(identity, frames, message, now)
        except transport.ContextTerminated:
            raise
        except Exception:
            # A bug of ours must not take the router down with it.
            log.exception("%s: error handling %s from %s", name, message, show(identity))

    # -- frontend: clients and schedulers --------------------------------------
    def _frontend_handlers(self) -> dict[type, Handler]:
        return {
            Request: self._on_request,
            Cancel: self._on_cancel,
            Schedule: self._on_schedule,
            Unschedule: self._on_schedule,
            Inform: self._on_frontend_inform,
            Heartbeat: self._on_frontend_heartbeat,
            Kbai: self._on_frontend_kbai,
            Disconnect: self._ignore,
            Ack: self._ignore,
        }

    def _fast_request(self, raw: list[bytes], now: float) -> bool:
        """A well-formed REQUEST without building a message object; False: decode it."""
        try:
            msgid = raw[4].decode()
            queue = raw[5].decode()
            headers = parse_headers(raw[6].decode())
            raw[7].decode()  # the body must be text; it is forwarded as bytes
        except (UnicodeDecodeError, ProtocolError):
            return False
        if not msgid or not queue:
            return False
        try:
            self._accept(raw[0], raw[1:], msgid, queue, headers, now)
        except transport.ContextTerminated:
            raise
        except Exception:
            log.exception("frontend: error handling REQUEST %s from %s", msgid, show(raw[0]))
        return True

    def _on_request(self, identity: bytes, frames: list[bytes], msg: Message, now: float) -> None:
        assert isinstance(msg, Request)
        self._accept(identity, frames, msg.msgid, msg.queue, msg.headers, now)

    def _accept(
        self,
        identity: bytes,
        frames: list[bytes],
        msgid: str,
        queue: str,
        headers: Headers,
        now: float,
    ) -> None:
        book = self.book
        if frames[6].lstrip()[:1] != b"[":
            book.reject(identity, msgid, 'bad body: a job is a JSON list such as ["run", {...}]')
            return
        if (
            self.settings.hwm_policy == "reject"
            and not book.is_held(msgid)
            and self._over_high_water()
        ):
            book.reject(
                identity,
                msgid,
                f"router is over its high-water mark ({self.settings.high_water_mark} jobs "
                "waiting); send it again later",
            )
            return
        book.accept(identity, frames, msgid, queue, headers, now)
        # New or a duplicate: either way the job is held; the ACK waits for the commit.
        self._acks.append((identity, frames[3]))

    def _on_cancel(self, identity: bytes, frames: list[bytes], msg: Message, now: float) -> None:
        assert isinstance(msg, Cancel)
        running = self.book.cancel(msg.job_msgid)
        if running is None:
            return
        worker = self.routing.workers.get(running.worker) if running.worker else None
        if worker is not None and worker.features:
            self._send_to_worker(
                worker.identity, Cancel(msgid=new_msgid(), job_msgid=msg.job_msgid), now
            )
        else:
            log.info(
                "CANCEL for msgid %s: it runs on a job manager that cannot cancel; it runs on",
                msg.job_msgid,
            )

    def _on_schedule(self, identity: bytes, frames: list[bytes], msg: Message, now: float) -> None:
        self._to_schedulers(isinstance(msg, Unschedule), frames, now)
        send(self.frontend, identity, Ack(msgid=new_msgid(), ack_msgid=msg.msgid))

    def _to_schedulers(self, broadcast: bool, frames: list[bytes], now: float) -> None:
        """SCHEDULE to one scheduler (round robin), UNSCHEDULE to all; buffer if none."""
        peers = self.schedulers
        if broadcast:
            sent = [self._forward_to_scheduler(s, frames, now) for s in list(peers.peers.values())]
            delivered = any(sent)
        else:
            delivered = False
            for _ in range(len(peers.peers)):
                scheduler = peers.next()
                if scheduler is not None and self._forward_to_scheduler(scheduler, frames, now):
                    delivered = True
                    break
        if not delivered:
            peers.buffered.append((broadcast, frames))
            log.debug("no scheduler connected: %s buffered", frames[2:4])

    def _forward_to_scheduler(self, scheduler: Scheduler, frames: list[bytes], now: float) -> bool:
        if forward(self.frontend, scheduler.identity, frames):
            scheduler.last_sent = now
            return True
        return False

    def _on_frontend_inform(
        self, identity: bytes, frames: list[bytes], msg: Message, now: float
    ) -> None:
        assert isinstance(msg, Inform)
        if msg.peer_type != C.PEER_SCHEDULER:
            self._warn("frontend", identity, "worker INFORM on the frontend (use the backend)")
            return
        if self.schedulers.add(identity, now):
            log.info("scheduler %s connected", show(identity))
        send(self.frontend, identity, Ack(msgid=new_msgid(), ack_msgid=msg.msgid))
        buffered = self.schedulers.buffered
        for _ in range(len(buffered)):
            broadcast, pending = buffered.popleft()
            self._to_schedulers(broadcast, pending, now)

    def _on_frontend_heartbeat(
        self, identity: bytes, frames: list[bytes], msg: Message, now: float
    ) -> None:
        scheduler = self.schedulers.peers.get(identity)
        if scheduler is not None:
            scheduler.last_heard = now

    def _on_frontend_kbai(
        self, identity: bytes, frames: list[bytes], msg: Message, now: float
    ) -> None:
        if self.schedulers.remove(identity):
            log.info("scheduler %s said goodbye", show(identity))

    def _ignore(self, identity: bytes, frames: list[bytes], msg: Message, now: float) -> None:
        log.debug("%s from %s ignored", msg.command, show(identity))

    # -- backend: job managers -------------------------------------------------
    def _backend_handlers(self) -> dict[type, Handler]:
        return {
            Inform: self._on_backend_inform,
            Ready: self._on_worker_message,
            Reply: self._on_worker_message,
            Heartbeat: self._on_worker_message,
            Kbai: self._on_worker_message,
            Ack: self._on_worker_message,
            Done: self._on_worker_message,
            Nack: self._on_worker_message,
            Features: self._on_worker_message,
        }

    def _on_backend_inform(
        self, identity: bytes, frames: list[bytes], msg: Message, now: float
    ) -> None:
        assert isinstance(msg, Inform)
        if msg.peer_type != C.PEER_WORKER:
            self._warn("backend", identity, "scheduler INFORM on the backend (use the frontend)")
            return
        queues = msg.effective_queues()
        self._departed.pop(identity, None)
        self._told.pop(identity, None)
        if identity in self.routing.workers:
            self.book.worker_failed(identity, "informed again")
        self.routing.add_worker(identity, queues, now)
        log.info("worker %s connected, queues %s", show(identity), list(queues))
        self._send_to_worker(identity, Ack(msgid=new_msgid(), ack_msgid=msg.msgid), now)
        # Only a peer that got FEATURES uses our extensions (a reference job
        # manager ignores a command it does not know once it has its ACK).
        self._send_to_worker(identity, Features(msgid=new_msgid(), features=FEATURES), now)
        self._retry = True  # jobs it had may wait again

    def _fast_ready(self, identity: bytes, now: float) -> bool:
        worker = self.routing.workers.get(identity)
        if worker is None:
            return False
        worker.last_heard = now
        self.book.ready(identity, now)
        return True

    def _fast_done(self, raw: list[bytes], now: float) -> bool:
        try:
            message = decode(raw[1:])
        except ProtocolError:
            return False
        assert isinstance(message, Done)
        identity = raw[0]
        worker = self.routing.workers.get(identity)
        if worker is None:
            self._from_unknown_worker(identity, raw[1:], message, now)
            return True
        worker.last_heard = now
        self.book.done(identity, message.job_msgid, message.status, message.payload, now)
        return True

    def _on_worker_message(
        self, identity: bytes, frames: list[bytes], msg: Message, now: float
    ) -> None:
        worker = self.routing.workers.get(identity)
        if worker is None:
            self._from_unknown_worker(identity, frames, msg, now)
            return
        worker.last_heard = now
        kind = type(msg)
        if kind is Ready:
            self.book.ready(identity, now)
        elif kind is Done:
            assert isinstance(msg, Done)
            self.book.done(identity, msg.job_msgid, msg.status, msg.payload, now)
        elif kind is Reply:
            self._on_reply(identity, frames, msg)
        elif kind is Nack:
            assert isinstance(msg, Nack)
            worker.features = True
            self.book.nack(identity, msg.job_msgid, msg.reason, now)
        elif kind is Features:
            worker.features = True
        elif kind is Kbai:
            self.book.worker_left(identity, now)
            self._remember_departed(identity)
            log.info("worker %s said goodbye", show(identity))
        # HEARTBEAT, ACK: hearing from it was the point.

    def _on_reply(self, identity: bytes, frames: list[bytes], msg: Message) -> None:
        """The reference's way to report a job: REPLY naming it (then READY)."""
        assert isinstance(msg, Reply)
        if msg.reply_to is None:
            self._warn("backend", identity, "REPLY without the id of the request it answers")
            return
        client = self.book.reply(identity, msg.reply_to)
        if client is None:
            log.debug("REPLY for msgid %s: no client waits for it", msg.reply_to)
            return
        if not forward(self.frontend, client, frames):
            log.info("REPLY for msgid %s dropped: client %s is gone", msg.reply_to, show(client))

    def _from_unknown_worker(
        self, identity: bytes, frames: list[bytes], msg: Message, now: float
    ) -> None:
        # A finished job's report is never thrown away: a job manager that left
        # (or that a restarted router does not know yet) still finished it.
        if isinstance(msg, Reply):
            self._on_reply(identity, frames, msg)
        elif isinstance(msg, Done):
            self.book.done(identity, msg.job_msgid, msg.status, msg.payload, now)
        elif isinstance(msg, Nack):
            self.book.nack(identity, msg.job_msgid, msg.reason, now)
        if isinstance(msg, Kbai) or identity in self._departed:
            log.debug("%s from departed worker %s", msg.command, show(identity))
            return
        self._warn("backend", identity, f"{msg.command} before INFORM", "told to DISCONNECT")
        last = self._told.get(identity)
        if last is None or now - last >= self.settings.heartbeat_interval:
            # The spec's answer to an unexpected command; the peer then INFORMs again.
            self._told[identity] = now
            if len(self._told) > WARN_MEMORY:
                self._told.popitem(last=False)
            send(self.backend, identity, Disconnect(msgid=new_msgid()))

    def _remember_departed(self, identity: bytes) -> None:
        self._departed[identity] = None
        if len(self._departed) > WARN_MEMORY:
            self._departed.popitem(last=False)

    # -- admin -------------------------------------------------------------------
    def _admin_handlers(self) -> dict[type, Handler]:
        return {AdminRequest: self._on_admin, Disconnect: self._on_admin_disconnect}

    def _on_admin(self, identity: bytes, frames: list[bytes], msg: Message, now: float) -> None:
        assert isinstance(msg, AdminRequest)
        if msg.action == C.STATUS:
            body = admin_json.status(self.routing, now)
            body["poisoned_messages"] = self.book.poisoned_list()
        elif msg.action == C.ROUTER_SHOW_WORKERS:
            body = admin_json.show_workers(self.routing)
        elif msg.action == C.MONITOR:
            body = self.book.monitor()
            body["blocked"] = self._blocked
        else:
            body = admin_json.show_schedulers(self.schedulers)
        send(self.admin, identity, Reply(msgid=new_msgid(), payload=json.dumps(body)))

    def _on_admin_disconnect(
        self, identity: bytes, frames: list[bytes], msg: Message, now: float
    ) -> None:
        log.info("DISCONNECT from the admin socket: saying KBAI to every peer and stopping")
        send(self.admin, identity, Ack(msgid=new_msgid(), ack_msgid=msg.msgid))
        for worker_id in list(self.routing.workers):
            send(self.backend, worker_id, Kbai(msgid=new_msgid()))
        for scheduler_id in list(self.schedulers.peers):
            send(self.frontend, scheduler_id, Kbai(msgid=new_msgid()))
        self.stop()

    # -- sending to workers and clients ---------------------------------------------
    def _deliver(self, worker: Worker, job: Job) -> bool:
        """Send a job to its worker now; on failure it waits again (at the front)."""
        try:
            self.backend.send_frames([worker.identity, *job.frames], flags=transport.NOBLOCK)
        except transport.Again:
            log.debug(
                "worker %s is not taking messages; msgid %s waits", show(worker.identity), job.msgid
            )
            self.book.undo(job)
            self._retry = True
            return False
        except transport.ZMQError as exc:
            if exc.errno != transport.EHOSTUNREACH:
                raise
            self.book.undo(job)
            self.book.worker_failed(worker.identity, "unreachable")
            self._retry = True
            return False
        worker.last_sent = job.dispatched_at
        return True

    def _to_client(self, identity: bytes, message: Message) -> None:
        send(self.frontend, identity, message)

    def _send_to_worker(self, identity: bytes, message: Message, now: float) -> None:
        if send(self.backend, identity, message):
            worker = self.routing.workers.get(identity)
            if worker is not None:
                worker.last_sent = now

    # -- heartbeats, leases ----------------------------------------------------------
    def _housekeeping(self, now: float) -> None:
        """Drop silent peers, hand out jobs whose lease ran out, send heartbeats."""
        s = self.settings
        book = self.book
        for identity in self.routing.expired(now, s.heartbeat_timeout):
            book.worker_failed(identity, f"silent for more than {s.heartbeat_timeout}s")
        book.expire_leases(now)
        if not self._blocked:  # a blocked frontend is not read: schedulers are not silent
            for identity in self.schedulers.expired(now, s.heartbeat_timeout):
                self.schedulers.remove(identity)
                log.warning(
                    "scheduler %s dropped: silent for more than %ss",
                    show(identity),
                    s.heartbeat_timeout,
                )
        for worker in list(self.routing.workers.values()):
            if now - worker.last_sent >= s.heartbeat_interval:
                self._send_to_worker(worker.identity, self._heartbeat(), now)
        for scheduler in list(self.schedulers.peers.values()):
            if now - scheduler.last_sent >= s.heartbeat_interval and send(
                self.frontend, scheduler.identity, self._heartbeat()
            ):
                scheduler.last_sent = now
        book.pump(now)

    @staticmethod
    def _heartbeat() -> Heartbeat:
        return Heartbeat(msgid=new_msgid(), timestamp=time.time())
