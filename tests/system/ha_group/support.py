"""Two routers of one group on one PostgreSQL journal, and what the tests ask of them."""

from __future__ import annotations

import contextlib
import re
import signal
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import zmq

from django_eventmq.protocol import Message, encode
from tests.support import Proc, python_module, tcp_addr, wait_for
from tests.system.chaos.jobs import RECORD_ENV
from tests.system.chaos.support import LOG_LEVEL, admin_call

#: Fast failure detection: a lease of 2 s, heartbeats every 0.5 s.
LEASE = 2.0
ENV = {
    "EMQ_HEARTBEAT_INTERVAL": "0.5",
    "EMQ_HEARTBEAT_TIMEOUT": "2",
    "EMQ_RECONNECT_MAX_DELAY": "1",
    "EMQ_POISON_AFTER": "1000",
}


class Member:
    """One router process of the group, on addresses of its own."""

    def __init__(
        self,
        name: str,
        dsn: str,
        group: str,
        env: dict[str, str],
        *,
        lease: float = LEASE,
        frontend: str | None = None,
        backend: str | None = None,
        admin: str | None = None,
        wait: bool = True,
    ) -> None:
        self.name = name
        self.frontend = frontend or tcp_addr()
        self.backend = backend or tcp_addr()
        self.admin = admin or tcp_addr()
        self.proc = Proc(
            python_module(
                "router",
                "--journal",
                dsn,
                "--group",
                group,
                "--lease-seconds",
                str(lease),
                "--frontend",
                self.frontend,
                "--backend",
                self.backend,
                "--admin",
                self.admin,
                "--log-level",
                LOG_LEVEL,
            ),
            env=env,
        )
        if wait:
            self.proc.wait_output(r"router group \w+: member \S+ started")

    def status(self, timeout: float = 5.0) -> dict[str, Any]:
        return admin_call(self.admin, "STATUS", timeout)

    def role(self) -> str:
        try:
            return str(self.status(2.0).get("role"))
        except AssertionError:  # no answer (stopped, killed)
            return "unreachable"


class Group:
    """Members A and B; A is started first and leads."""

    def __init__(
        self, dsn: str, group: str, workdir: Path, *, lease: float = LEASE, **env: str
    ) -> None:
        self.dsn, self.group, self.lease = dsn, group, lease
        self.record = workdir / "ran.txt"
        self.env = {**ENV, RECORD_ENV: str(self.record), **env}
        self.procs: list[Proc] = []
        try:
            self.a = self.member("a")
            wait_for(lambda: self.a.role() == "leader", 30, "A to lead")
            self.b = self.member("b")
            self.b.proc.wait_output(r"standby in group \w+; leader is \S+ \(epoch 1\)")
        except BaseException:
            self.stop()
            print(self.outputs())
            raise

    def member(self, name: str, **kwargs: Any) -> Member:
        m = Member(name, self.dsn, self.group, self.env, lease=self.lease, **kwargs)
        self.procs.append(m.proc)
        return m

    def jobmanager(self, backend: str) -> Proc:
        proc = Proc(
            python_module(
                "jobmanager",
                "--broker",
                backend,
                "--concurrency",
                "2",
                "--job-module",
                "tests.system.chaos.jobs",
                "--log-level",
                LOG_LEVEL,
            ),
            env=self.env,
        )
        self.procs.append(proc)
        return proc

    def lease_row(self) -> tuple[Any, ...] | None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return conn.execute(
                f"SELECT epoch, member, pid FROM emq_{self.group}.lease WHERE id = 1"
            ).fetchone()

    def outputs(self) -> str:
        return "\n".join(f"--- {' '.join(p.args[-12:])}:\n{p.output()[-3000:]}" for p in self.procs)

    def stop(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(Exception):
                proc.signal(signal.SIGCONT)  # a stopped process would not handle SIGTERM
                proc.stop()


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*router ready", re.MULTILINE)


def ready_at(proc: Proc) -> float:
    """Unix time of the last "router ready" line of ``proc`` (its log's clock)."""
    stamps = _STAMP.findall(proc.output())
    assert stamps, proc.output()
    return datetime.strptime(stamps[-1], "%Y-%m-%d %H:%M:%S,%f").timestamp()


class Wire:
    """A raw DEALER (client or job manager) connected to one address only: what it gets."""

    def __init__(self, addr: str, identity: bytes) -> None:
        ctx: zmq.Context[Any] = zmq.Context.instance()
        self.sock: zmq.Socket[Any] = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.IDENTITY, identity)
        self.sock.connect(addr)

    def send(self, message: Message) -> None:
        self.sock.send_multipart(encode(message))

    def received(self, seconds: float) -> list[list[bytes]]:
        """Everything that arrives within ``seconds`` (a bounded look, not a wait for an event)."""
        got: list[list[bytes]] = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.sock.poll(int(left * 1000) + 1):
                got.append(self.sock.recv_multipart())
        return got

    def close(self) -> None:
        self.sock.close(linger=0)


def commands(messages: list[list[bytes]]) -> list[str]:
    """The eMQP command of each message (frame 2 after the empty delimiter and version)."""
    return [m[2].decode() if len(m) > 2 else "?" for m in messages]
