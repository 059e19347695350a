"""The router (broker): clients and schedulers on the frontend, job managers on
the backend, administration on a third socket.

The router forwards raw frames and never parses job bodies; routing decisions
live in :mod:`.queues`. Sends never block: a peer whose pipe is full or that
is gone costs us one message (an ACK, a heartbeat) or sends a REQUEST back to
the front of its queue, never the router itself.
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable

from ..errors import ProtocolError
from ..protocol import (
    Ack,
    AdminRequest,
    Disconnect,
    Heartbeat,
    Inform,
    Kbai,
    Message,
    Ready,
    Reply,
    Request,
    Schedule,
    Unschedule,
    new_msgid,
)
from ..protocol import constants as C
from . import router_admin as admin_json
from . import transport
from .queues import Dropped, Job, Routing, Scheduler, Schedulers, Worker
from .router_io import MEMORY, WarnOnce, forward, send, show
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

Handler = Callable[[bytes, list[bytes], Message, float], None]


class Router:
    """The eMQP/1.0 router. ``run()`` in its own thread or process; ``stop()`` from anywhere."""

    #: The bound sockets, made by :meth:`start`.
    frontend: Channel
    backend: Channel
    admin: Channel

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.routing = Routing()
        self.schedulers = Schedulers()
        #: msgid -> client identity, for REQUESTs with ``reply-requested``.
        self.reply_routes: dict[str, bytes] = {}
        self.frontend_address = ""
        self.backend_address = ""
        self.admin_address = ""
        self._stopping = False
        self._retry = False
        self._next_tick = 0.0
        self._tick = settings.heartbeat_interval / 4
        self._warn = WarnOnce()
        #: Workers that said KBAI: their late REPLY/READY are expected, not an error.
        self._departed: OrderedDict[bytes, None] = OrderedDict()
        #: Unknown backend peers we told to DISCONNECT, and when.
        self._told: OrderedDict[bytes, float] = OrderedDict()
        self._channels: list[Channel] = []
        self._poller: transport.Poller | None = None
        self._handlers: dict[Channel, tuple[str, bool, dict[type, Handler]]] = {}

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> None:
        """Bind the three sockets and log the ready line."""
        if self._poller is not None:
            return
        s = self.settings
        try:
            self.frontend = self._bind(s.frontend_addr)
            self.backend = self._bind(s.backend_addr)
            self.admin = self._bind(s.admin_addr)
        except BaseException:
            self.close()
            raise
        self.frontend_address = self.frontend.address
        self.backend_address = self.backend.address
        self.admin_address = self.admin.address
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
        """Close the sockets (idempotent)."""
        for channel in self._channels:
            channel.close()
        self._channels.clear()
        self._poller = None

    def loop_once(self, timeout_ms: int = 100, now: float | None = None) -> None:
        """Wait up to ``timeout_ms`` for messages, handle all that are ready, then
        do any heartbeat work that is due."""
        if self._poller is None:
            self.start()
        assert self._poller is not None
        timeout_ms = min(timeout_ms, max(1, int(self._tick * 1000)))
        if self._retry:
            timeout_ms = min(timeout_ms, RETRY_MS)
        ready = self._poller.poll(timeout_ms)
        t = time.monotonic() if now is None else now
        for channel in ready:
            self._drain(channel, t)
        if self._retry:
            self._pump(t)
        if t >= self._next_tick:
            self._next_tick = t + self._tick
            self._housekeeping(t)

    # -- receiving -------------------------------------------------------------
    def _drain(self, channel: Channel, now: float) -> None:
        name, admin_socket, handlers = self._handlers[channel]
        for _ in range(DRAIN_CAP):
            try:
                identity, frames, message = channel.recv(
                    flags=transport.NOBLOCK, admin=admin_socket
                )
            except transport.Again:
                return
            except ProtocolError as exc:
                self._warn(name, exc.identity, exc.reason, "dropped malformed message")
                continue
            handler = handlers.get(type(message))
            if handler is None:
                self._warn(name, identity, f"unexpected command {message.command or 'admin'}")
                continue
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
            Schedule: self._on_schedule,
            Unschedule: self._on_schedule,
            Inform: self._on_frontend_inform,
            Heartbeat: self._on_frontend_heartbeat,
            Kbai: self._on_frontend_kbai,
            Disconnect: self._ignore,
            Ack: self._ignore,
        }

    def _on_request(self, identity: bytes, frames: list[bytes], msg: Message, now: float) -> None:
        assert isinstance(msg, Request)
        headers = msg.headers
        if headers.reply_requested:
            self.reply_routes[msg.msgid] = identity
        job = Job(msg.msgid, msg.queue, frames, headers.guarantee, now)
        worker = self.routing.submit(job, now)
        if worker is not None:
            self._deliver(worker, job, now)
        send(self.frontend, identity, Ack(msgid=new_msgid(), ack_msgid=msg.msgid))

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
        dropped = self.routing.add_worker(identity, queues, now)
        if dropped is not None:
            self._dropped(dropped, "informed again")
        log.info("worker %s connected, queues %s", show(identity), list(queues))
        self._send_to_worker(identity, Ack(msgid=new_msgid(), ack_msgid=msg.msgid), now)
        if dropped is not None and dropped.requeued:
            self._pump(now)

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
            job = self.routing.ready(identity, now)
            if job is not None:
                self._deliver(worker, job, now)
        elif kind is Reply:
            self._on_reply(identity, frames, msg)
        elif kind is Kbai:
            self.routing.remove_worker(identity, failed=False)
            self._remember_departed(identity)
            log.info("worker %s said goodbye", show(identity))
        # HEARTBEAT, ACK: hearing from it was the point.

    def _on_reply(self, identity: bytes, frames: list[bytes], msg: Message) -> None:
        assert isinstance(msg, Reply)
        if msg.reply_to is None:
            self._warn("backend", identity, "REPLY without the id of the request it answers")
            return
        self.routing.reply(msg.reply_to)
        client = self.reply_routes.pop(msg.reply_to, None)
        if client is None:
            log.debug("REPLY for msgid %s: no client waits for it", msg.reply_to)
            return
        if not forward(self.frontend, client, frames):
            log.info("REPLY for msgid %s dropped: client %s is gone", msg.reply_to, show(client))

    def _from_unknown_worker(
        self, identity: bytes, frames: list[bytes], msg: Message, now: float
    ) -> None:
        if isinstance(msg, Reply):
            self._on_reply(identity, frames, msg)  # a finished job's result is never thrown away
        if isinstance(msg, Kbai) or identity in self._departed:
            log.debug("%s from departed worker %s", msg.command, show(identity))
            return
        self._warn("backend", identity, f"{msg.command} before INFORM", "told to DISCONNECT")
        last = self._told.get(identity)
        if last is None or now - last >= self.settings.heartbeat_interval:
            # The spec's answer to an unexpected command; the peer then INFORMs again.
            self._told[identity] = now
            if len(self._told) > MEMORY:
                self._told.popitem(last=False)
            send(self.backend, identity, Disconnect(msgid=new_msgid()))

    def _remember_departed(self, identity: bytes) -> None:
        self._departed[identity] = None
        if len(self._departed) > MEMORY:
            self._departed.popitem(last=False)

    # -- admin -------------------------------------------------------------------
    def _admin_handlers(self) -> dict[type, Handler]:
        return {AdminRequest: self._on_admin, Disconnect: self._on_admin_disconnect}

    def _on_admin(self, identity: bytes, frames: list[bytes], msg: Message, now: float) -> None:
        assert isinstance(msg, AdminRequest)
        if msg.action == C.STATUS:
            body = admin_json.status(self.routing, now)
        elif msg.action == C.ROUTER_SHOW_WORKERS:
            body = admin_json.show_workers(self.routing)
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

    # -- dispatching ------------------------------------------------------------
    def _deliver(self, worker: Worker, job: Job, now: float) -> bool:
        """Send a dispatched job to its worker; on failure it goes back to the front."""
        try:
            self.backend.send_frames([worker.identity, *job.frames], flags=transport.NOBLOCK)
        except transport.Again:
            log.debug(
                "worker %s is not taking messages; msgid %s waits", show(worker.identity), job.msgid
            )
            self.routing.undo(job)
            self._retry = True
            return False
        except transport.ZMQError as exc:
            if exc.errno != transport.EHOSTUNREACH:
                raise
            self.routing.undo(job)
            self._drop_worker(worker.identity, "unreachable")
            self._retry = True
            return False
        worker.last_sent = now
        return True

    def _pump(self, now: float) -> None:
        """Hand waiting jobs to free workers (after a failed send or a requeue)."""
        self._retry = False
        for queue in list(self.routing.waiting):
            while (pair := self.routing.dispatch_waiting(queue, now)) is not None:
                if not self._deliver(*pair, now):
                    return

    def _drop_worker(self, identity: bytes, why: str) -> None:
        dropped = self.routing.remove_worker(identity, failed=True)
        if dropped is not None:
            self._dropped(dropped, why)

    def _dropped(self, dropped: Dropped, why: str) -> None:
        lost = [job.msgid for job in dropped.lost]
        for msgid in lost:
            self.reply_routes.pop(msgid, None)
        log.warning(
            "worker %s dropped (%s): %d in-flight job(s) requeued, %d lost%s",
            show(dropped.worker.identity),
            why,
            len(dropped.requeued),
            len(lost),
            f" (msgids {', '.join(lost[:20])})" if lost else "",
        )

    # -- heartbeats ---------------------------------------------------------------
    def _housekeeping(self, now: float) -> None:
        """Drop silent peers and send heartbeats to the ones we have been quiet towards."""
        s = self.settings
        requeued = False
        for identity in self.routing.expired(now, s.heartbeat_timeout):
            dropped = self.routing.remove_worker(identity, failed=True)
            if dropped is not None:
                self._dropped(dropped, f"silent for more than {s.heartbeat_timeout}s")
                requeued = requeued or bool(dropped.requeued)
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
        if requeued:
            self._pump(now)

    @staticmethod
    def _heartbeat() -> Heartbeat:
        return Heartbeat(msgid=new_msgid(), timestamp=time.time())

    # -- sending -------------------------------------------------------------------
    def _send_to_worker(self, identity: bytes, message: Message, now: float) -> None:
        if send(self.backend, identity, message):
            worker = self.routing.workers.get(identity)
            if worker is not None:
                worker.last_sent = now
