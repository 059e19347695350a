"""One member of a router group: stand by until the group's lease is free, then lead.

Several routers share one PostgreSQL journal (``JOURNAL_URL``, schema
``emq_<group>``); exactly one leads. A member's process goes round:

1. **standby**: binds nothing but its admin socket (STATUS answers role
   ``standby`` and who leads), and asks :meth:`.leadership.Lease.try_lead`
   every poll (a heartbeat, or a fifth of the lease if that is shorter);
2. **leader**: a :class:`.router.Router` on a
   :class:`.journal.postgres.PostgresJournal` whose every transaction is
   fenced by the epoch it won (:func:`.leadership.fence`), serving until
3. ``LeadershipLost`` (another member holds a newer epoch, or the journal's
   connection died): the router is closed without committing or sending
   anything more (sockets unbound, its memory dropped) and the member stands
   by again.

SIGTERM/SIGINT (or an admin DISCONNECT) stop it: a leader commits, then
releases the lease so a standby takes over at its next poll instead of
waiting for the lease to run out. See docs/ha.md. Never imports Django.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from typing import Any

from django_eventmq.errors import ConfigurationError, ProtocolError
from django_eventmq.protocol import Ack, AdminRequest, Reply, decode, new_msgid
from django_eventmq.protocol import constants as C
from django_eventmq.protocol.frame_fields import after_identity, identity_of
from django_eventmq.router.leadership import LeaderInfo, LeadershipLost, Lease, fence
from django_eventmq.router.router import Router
from django_eventmq.runtime import security, transport
from django_eventmq.runtime.admin_token import AdminGate
from django_eventmq.runtime.outbox import WarnOnce, send, show
from django_eventmq.runtime.service import Service
from django_eventmq.runtime.settings import Settings
from django_eventmq.runtime.transport import Channel

__all__ = ["GroupMember", "default_member"]

log = logging.getLogger("django_eventmq.router")

#: Admin messages a standby reads per poll before it looks at the lease again.
ADMIN_DRAIN = 100


def default_member(settings: Settings) -> str:
    """This process's name in its group: host and pid (``web-2:4121``)."""
    return f"{socket.gethostname()}:{os.getpid()}"


class GroupMember(Service):
    """A router that serves only while it holds its group's lease (module docstring)."""

    label = "router"
    log = log

    def __init__(self, settings: Settings, *, member: str | None = None) -> None:
        super().__init__()
        if not settings.journal_url:
            raise ConfigurationError(
                "a router group needs its PostgreSQL journal: set JOURNAL_URL (or --journal "
                "postgresql://user@host:5432/db)"
            )
        self.settings = settings
        self.group = settings.group
        self.member = member or default_member(settings)
        #: The router while this member leads, else None.
        self.router: Router | None = None
        #: The epoch this member leads with, else None.
        self.epoch: int | None = None
        #: Times this member took or lost the lead (``emq_router_leadership_changes``).
        self.leadership_changes = 0
        self.admin_address = ""
        self._admin: Channel | None = None
        self._guard: security.Guard | None = None
        #: The admin token of this member's admin socket (its leader's router uses it too).
        self._gate = AdminGate(settings)
        self._lease: Lease | None = None
        self._info: LeaderInfo | None = None
        #: (epoch, member) of the leader last named in the standby log line.
        self._told: tuple[int, str] | None = None
        self._next_try = 0.0
        self._poll = min(settings.heartbeat_interval, settings.lease_seconds / 5)
        self._warn = WarnOnce()

    @property
    def role(self) -> str:
        return "leader" if self.router is not None else "standby"

    # -- lifecycle ---------------------------------------------------------------
    def start(self) -> None:
        """Bind the admin socket and connect the lease (nothing else: a standby binds
        no frontend or backend, so peers cannot mistake it for the leader)."""
        if self._admin is not None:
            return
        s = self.settings
        self._guard = security.Guard(s, (security.ADMIN,))
        self._guard.start()
        self._admin = Channel(
            transport.ROUTER,
            bind=s.admin_addr,
            options=security.secure_channel_options(s, security.ADMIN, security.SERVER),
            limits=security.limits_from_settings(s),
            bind_setting="ADMIN_ADDR",
            bind_option="--admin",
        )
        self.admin_address = self._admin.address
        self._gate.open(self.admin_address)
        self._lease = Lease(s.journal_url, self.group, self.member, lease_seconds=s.lease_seconds)
        log.info(
            "router group %s: member %s started (admin=%s, lease %gs); standing by",
            self.group,
            self.member,
            self.admin_address,
            s.lease_seconds,
        )

    def loop_once(self) -> None:
        """One turn: the router's while leading, else a look at the lease and the admin socket."""
        if self._admin is None:
            self.start()
        router = self.router
        if router is not None:
            try:
                router.loop_once()
            except LeadershipLost as exc:
                self._step_down(str(exc))
                return
            if router.stopping:  # DISCONNECT on the admin socket
                self.stop()
            return
        now = time.monotonic()
        if now >= self._next_try:
            self._next_try = now + self._poll
            lease = self._lease
            assert lease is not None
            epoch = lease.try_lead()
            if epoch is not None:
                self._lead(epoch)
                return
            self._note_leader(lease.info())
        self._serve_admin(max(1, int((self._next_try - time.monotonic()) * 1000)))

    def close(self) -> None:
        """A leader's router closes (committing) and the lease is released; then the rest."""
        router, self.router = self.router, None
        epoch, self.epoch = self.epoch, None
        if router is not None:
            router.close()
            if not router.lost and epoch is not None and self._lease is not None:
                self._lease.release(epoch)
        if self._lease is not None:
            self._lease.close()
            self._lease = None
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        if self._guard is not None:
            self._guard.stop()
            self._guard = None
        self._gate.close()

    def summary(self) -> str:
        return f" (group {self.group}, member {self.member})"

    # -- leading -------------------------------------------------------------------
    def _lead(self, epoch: int) -> None:
        """Won ``epoch``: start a router on the group's journal, fenced by that epoch."""
        s = self.settings
        group, lease_seconds = self.group, s.lease_seconds

        def open_journal() -> Any:
            from django_eventmq.router.journal.postgres import PostgresJournal

            return PostgresJournal(
                s.journal_url,
                group=group,
                sync=s.journal_sync,
                fence=lambda cursor: fence(cursor, group, epoch, lease_seconds),
                lease_seconds=lease_seconds,
            )

        router = Router(
            s,
            journal=open_journal,
            lease_seconds=lease_seconds,
            admin=self._admin,
            admin_gate=self._gate,
            status_extra=self.group_status,
            fatal=(LeadershipLost,),
        )
        self.epoch = epoch
        try:
            router.start()
        except LeadershipLost as exc:  # deposed before it served (router closed itself)
            self.epoch = None
            if self._lease is not None:
                self._lease.release(epoch)  # if still ours: another member may do better
            log.warning(
                "router group %s: %s lost epoch %d while starting: %s; standing by",
                self.group,
                self.member,
                epoch,
                exc,
            )
            return
        except BaseException:
            # Cannot serve (an address in use, ...): let a standby lead at once.
            self.epoch = None
            if self._lease is not None:
                self._lease.release(epoch)
            raise
        self.router = router
        self.leadership_changes += 1
        self._told = None
        log.info(
            "router group %s: %s is the leader (epoch %d); frontend=%s backend=%s",
            self.group,
            self.member,
            epoch,
            router.frontend_address,
            router.backend_address,
        )

    def _step_down(self, reason: str) -> None:
        """The journal was lost: close the router without a commit, and stand by."""
        router, self.router = self.router, None
        epoch, self.epoch = self.epoch, None
        assert router is not None
        router.lost = True
        router.close()
        self.leadership_changes += 1
        self._next_try = time.monotonic() + self._poll
        log.warning(
            "router group %s: %s is no longer the leader (epoch %s): %s; its router closed "
            "without committing or sending anything more; standing by",
            self.group,
            self.member,
            epoch,
            reason,
        )

    # -- standing by -------------------------------------------------------------------
    def _note_leader(self, info: LeaderInfo | None) -> None:
        """Remember who leads; log it once, and again when it changes."""
        self._info = info
        if info is None:
            return
        key = (info.epoch, info.member)
        if key != self._told:
            self._told = key
            log.info(
                "standby in group %s; leader is %s (epoch %d)", self.group, info.member, info.epoch
            )

    def _serve_admin(self, timeout_ms: int) -> None:
        admin = self._admin
        assert admin is not None
        if not admin.poll(timeout_ms):
            return
        for _ in range(ADMIN_DRAIN):
            try:
                raw = admin.recv_frames(flags=transport.NOBLOCK)
            except transport.Again:
                return
            self._on_admin(raw)

    def _on_admin(self, raw: list[bytes]) -> None:
        admin = self._admin
        assert admin is not None
        identity = identity_of(raw)
        try:
            message = decode(after_identity(raw), admin=True)
        except ProtocolError as exc:
            self._warn("admin", identity, exc.reason, "dropped malformed message")
            return
        if not isinstance(message, AdminRequest):
            self._warn("admin", identity, f"unexpected command {message.command or 'admin'}")
            return
        if self._gate.turn_away(admin, identity, message, self._warn):
            return
        if message.action == C.DISCONNECT:
            log.info("DISCONNECT from the admin socket: stopping (standby, %s)", show(identity))
            send(admin, identity, Ack(msgid=new_msgid(), ack_msgid=message.msgid))
            self.stop()
            return
        body: dict[str, Any] = self.group_status()
        if message.action == C.ROUTER_SHOW_WORKERS:
            body.update(connected_workers={}, connected_queues={})
        elif message.action == C.ROUTER_SHOW_SCHEDULERS:
            body.update(connected_schedulers={})
        elif message.action == C.ROUTER_SHOW_JOBS:
            body.update(jobs=[])
        send(admin, identity, Reply(msgid=new_msgid(), payload=json.dumps(body)))

    # -- what STATUS says ------------------------------------------------------------
    def group_status(self) -> dict[str, Any]:
        """The group part of STATUS: this member's role and the lease row (LeaderInfo)."""
        if self._lease is not None:
            info = self._lease.info()
            if info is not None:
                self._info = info
        info = self._info
        body: dict[str, Any] = {
            "group": self.group,
            "role": self.role,
            "member": self.member,
            "leadership_changes": self.leadership_changes,
        }
        if info is not None:
            body.update(
                epoch=info.epoch,
                leader=info.member,
                leader_pid=info.pid,
                leader_since=info.since,
                lease_expires=info.expires,
                failovers=info.failovers,
                last_failover=info.last_failover,
                last_failover_seconds=info.last_failover_seconds,
            )
        return body
