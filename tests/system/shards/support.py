"""Two router groups (shards) on one PostgreSQL, each with its own schema, and their peers."""

from __future__ import annotations

import contextlib
import signal
import sys
import uuid
from pathlib import Path

from django_eventmq.runtime.addresses import shard_of_queue
from tests.pg_support import drop_group
from tests.support import Proc, python_module, tcp_addr
from tests.system.chaos.jobs import RECORD_ENV
from tests.system.chaos.support import LOG_LEVEL, admin_call
from tests.system.ha_group.support import ENV as GROUP_ENV
from tests.system.ha_group.support import Member

#: Fast failure detection, as in tests/system/ha_group; a client moves on from a
#: group that is down after a second.
ENV = {**GROUP_ENV, "EMQ_SEND_TIMEOUT": "1"}


class Shard:
    """One router group: member addresses fixed up front; ``a`` starts and leads,
    ``b`` is the standby's place (nothing listens there until :meth:`start` ``"b"``)."""

    def __init__(self, dsn: str, name: str, env: dict[str, str]) -> None:
        self.dsn, self.name, self.env = dsn, name, env
        self.frontends = {"a": tcp_addr(), "b": tcp_addr()}
        self.backends = {"a": tcp_addr(), "b": tcp_addr()}
        self.admins = {"a": tcp_addr(), "b": tcp_addr()}
        self.procs: dict[str, Proc] = {}

    @property
    def broker(self) -> str:
        return f"{self.frontends['a']},{self.frontends['b']}"

    @property
    def worker(self) -> str:
        return f"{self.backends['a']},{self.backends['b']}"

    def start(self, member: str) -> Proc:
        started = Member(
            member,
            self.dsn,
            self.name,
            self.env,
            frontend=self.frontends[member],
            backend=self.backends[member],
            admin=self.admins[member],
        )
        self.procs[member] = started.proc
        started.proc.wait_output(r"router ready", 30)
        return started.proc

    def processed(self, member: str) -> dict[str, int]:
        """Jobs this member's router saw finished, by queue (its STATUS)."""
        answer = admin_call(self.admins[member], "STATUS", 5.0)
        return dict(answer.get("processed_messages_by_queue", {}))

    def kill(self, member: str) -> None:
        self.procs[member].signal(signal.SIGKILL)


class Shards:
    """Two groups, and the job managers and clients started against both."""

    def __init__(self, dsn: str, workdir: Path) -> None:
        self.dsn = dsn
        self.record = workdir / "ran.txt"
        self.env = {**ENV, RECORD_ENV: str(self.record)}
        tag = uuid.uuid4().hex[:10]
        self.groups = [Shard(dsn, f"s{tag}_{i}", self.env) for i in (1, 2)]
        self.others: list[Proc] = []
        try:
            for group in self.groups:
                group.start("a")
        except BaseException:
            self.stop()
            raise

    @property
    def broker(self) -> str:
        """BROKER_ADDR of both groups: ``a1,b1;a2,b2``."""
        return ";".join(g.broker for g in self.groups)

    @property
    def worker(self) -> str:
        """WORKER_ADDR of both groups."""
        return ";".join(g.worker for g in self.groups)

    def jobmanager(self, queues: str) -> Proc:
        proc = Proc(
            python_module(
                "jobmanager",
                "--broker",
                self.worker,
                "--queues",
                queues,
                "--concurrency",
                "2",
                "--job-module",
                "tests.system.chaos.jobs",
                "--log-level",
                LOG_LEVEL,
            ),
            env=self.env,
        )
        self.others.append(proc)
        return proc

    def delay_client(self, prefix: str, count: int, queues: str) -> Proc:
        """A process sending ``count`` guaranteed jobs with ``Job.send()`` (``.delay()``'s path)."""
        proc = Proc(
            [sys.executable, "-m", "tests.system.shards.delay_client", prefix, str(count), queues],
            env={**self.env, "EMQ_BROKER_ADDR": self.broker, "EMQ_ACK_TIMEOUT": "1"},
        )
        self.others.append(proc)
        return proc

    def outputs(self) -> str:
        procs = [p for g in self.groups for p in g.procs.values()] + self.others
        return "\n".join(f"--- {' '.join(p.args[-10:])}:\n{p.output()[-3000:]}" for p in procs)

    def stop(self) -> None:
        for proc in self.others + [p for g in self.groups for p in g.procs.values()]:
            with contextlib.suppress(Exception):
                proc.stop()
        for group in self.groups:
            with contextlib.suppress(Exception):
                drop_group(self.dsn, group.name)


def queue_of_group(index: int, groups: int = 2, prefix: str = "q") -> str:
    """A queue name whose jobs go to group ``index`` (0-based) when every group is up."""
    for n in range(1000):
        name = f"{prefix}{n}"
        if shard_of_queue(name, groups) == index:
            return name
    raise AssertionError("no queue name found")  # pragma: no cover - crc32 spreads
