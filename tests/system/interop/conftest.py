"""Fixtures for interop tests: our processes and the reference eventmq 0.3.13's, on loopback.

Every process is a real subprocess on random 127.0.0.1 ports, started with
:class:`tests.support.Proc` and stopped in teardown. Routers and job managers
are module-scoped (one set per test module); each test records its jobs in
its own file, so tests sharing a router never see each other's work.

The reference is driven only from subprocesses (its console scripts and
``tests/system/interop/reference_client.py``): importing it here would let its import
side effects (logging set-up, settings) leak into pytest.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import zmq

from django_eventmq.client.pool import close_clients
from django_eventmq.runtime import config
from tests.support import Proc, python_module, tcp_addr, wait_for

BIN = Path(sys.executable).parent
REF_ROUTER = BIN / "emq-router"
REF_JOBMANAGER = BIN / "emq-jobmanager"

#: Why the interop tests would be skipped (None: they run).
REFERENCE_MISSING: str | None = (
    "the reference eventmq 0.3.13 is not installed (pip install --no-deps eventmq==0.3.13)"
    if importlib.util.find_spec("eventmq") is None
    else None
)

#: The marks of every interop test module (``pytestmark = INTEROP``).
INTEROP = [
    pytest.mark.interop,
    pytest.mark.skipif(REFERENCE_MISSING is not None, reason=REFERENCE_MISSING or ""),
]

#: Job modules our job managers load: one @job module and one allowed plain module.
RECORD_MODULE = "tests.system.interop.refjobs.record"
PLAIN_MODULE = "tests.system.interop.refjobs.plain"
RECORD_JOB = f"{RECORD_MODULE}.record"
PLAIN_JOB = f"{PLAIN_MODULE}.plain_record"

#: The reference job manager polls once a second and starts its workers only
#: after a router HEARTBEAT (every 3 s): a first job can take several seconds.
REFERENCE_DEADLINE = 20.0
OUR_DEADLINE = 10.0


# -- helpers ------------------------------------------------------------------


class Admin:
    """A DEALER on a router's admin socket (ours or the reference's)."""

    def __init__(self, addr: str) -> None:
        self.socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.IDENTITY, f"admin-{uuid.uuid4()}".encode())
        self.socket.connect(addr)

    def call(self, command: str, timeout: float = 5.0) -> dict[str, Any]:
        """Send ``command`` and return the JSON of its REPLY."""
        self.socket.send_multipart([b"", b"eMQP/1.0", command.encode(), str(uuid.uuid4()).encode()])
        if not self.socket.poll(int(timeout * 1000)):
            raise AssertionError(f"no answer to admin {command} within {timeout}s")
        frames = self.socket.recv_multipart()
        assert frames[2] == b"REPLY", frames
        return json.loads(frames[-1])  # type: ignore[no-any-return]

    def processed(self, queue: str = "default") -> int:
        return int(self.call("STATUS")["processed_messages_by_queue"].get(queue, 0))

    def free_slots(self) -> int:
        workers = self.call("ROUTER_SHOW_WORKERS")["connected_workers"]
        return sum(int(w["available_slots"]) for w in workers.values())

    def close(self) -> None:
        self.socket.close(linger=0)


def read_records(path: Path) -> list[dict[str, Any]]:
    """The JSON lines a ``refjobs`` job appended to ``path`` (none yet: [])."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_records(path: Path, count: int = 1, timeout: float = OUR_DEADLINE) -> list[dict[str, Any]]:
    """Wait until ``count`` jobs recorded themselves in ``path``; return the records."""
    records: list[dict[str, Any]] = wait_for(
        lambda: (r := read_records(path)) and len(r) >= count and r,
        timeout,
        f"{count} job record(s) in {path.name}",
    )
    return records


def without_pid(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "pid"} for r in records]


@dataclass
class Router:
    """A running router (ours or the reference's) and its addresses."""

    proc: Proc
    frontend: str
    backend: str
    admin_addr: str
    admins: list[Admin] = field(default_factory=list)
    #: A directory removed when the router stops (our router's journal).
    scratch: Path | None = None

    def admin(self) -> Admin:
        admin = Admin(self.admin_addr)
        self.admins.append(admin)
        return admin

    def alive(self) -> bool:
        return self.proc.popen.poll() is None

    def stop(self) -> int:
        for admin in self.admins:
            admin.close()
        code = self.proc.stop()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
        return code


# -- process starters ----------------------------------------------------------


def start_our_router(env: dict[str, str] | None = None, *, like: Router | None = None) -> Router:
    """Our router; on the addresses of ``like`` (stopped before) when given."""
    if like is None:
        frontend, backend, admin = tcp_addr(), tcp_addr(), tcp_addr()
    else:
        frontend, backend, admin = like.frontend, like.backend, like.admin_addr
    # Its journal in a temporary directory, removed at stop: nothing piles up in ./var.
    scratch = Path(tempfile.mkdtemp(prefix="emq-interop-router-"))
    proc = Proc(
        python_module("router", "--frontend", frontend, "--backend", backend, "--admin", admin),
        env={"EMQ_JOURNAL_PATH": str(scratch / "journal.sqlite3"), **(env or {})},
    )
    try:
        proc.wait_output(r"router ready")
    except BaseException:
        proc.stop()
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return Router(proc, frontend, backend, admin, scratch=scratch)


def start_reference_router(workdir: Path) -> Router:
    frontend, backend, admin = tcp_addr(), tcp_addr(), tcp_addr()
    conf = workdir / "router.conf"
    # WAL must be set: the reference creates its directory even with the WAL off.
    conf.write_text(
        "[global]\n"
        f"FRONTEND_ADDR={frontend}\nBACKEND_ADDR={backend}\nADMINISTRATIVE_ADDR={admin}\n"
        f"WAL={workdir / 'wal.log'}\n"
    )
    proc = Proc([str(REF_ROUTER), "-C", str(conf)], env={"EVENTMQ_CONFIG_FILE": str(conf)})
    try:
        proc.wait_output(r"Listening for administrative commands")
    except BaseException:
        proc.stop()
        raise
    return Router(proc, frontend, backend, admin)


def start_our_jobmanager(backend: str, env: dict[str, str] | None = None) -> Proc:
    proc = Proc(
        python_module(
            "jobmanager",
            "--broker",
            backend,
            "--queues",
            "email:30,default:10",
            "--concurrency",
            "2",
            "--job-module",
            RECORD_MODULE,
            "--allow-module",
            PLAIN_MODULE,
        ),
        env=env,
    )
    try:
        proc.wait_output(r"jobmanager connected to")
    except BaseException:
        proc.stop()
        raise
    return proc


def start_reference_jobmanager(backend: str, workdir: Path) -> Proc:
    # Proc puts the checkout on PYTHONPATH, which is how the reference finds
    # tests.system.interop.refjobs (it imports a job's "path" itself). An empty
    # config file keeps it from reading /etc/eventmq.conf.
    conf = workdir / "jobmanager.conf"
    conf.write_text("[jobmanager]\n")
    return Proc(
        [str(REF_JOBMANAGER), "-C", str(conf), "-B", backend, "-Q", "default", "-J", "2"],
        env={"EVENTMQ_CONFIG_FILE": str(conf)},
    )


def start_reference_scheduler(frontend: str, workdir: Path) -> Proc:
    """The reference scheduler on a router's frontend (no Redis: it keeps schedules in memory)."""
    conf = workdir / "scheduler.conf"
    conf.write_text(
        f"[scheduler]\nSCHEDULER_ADDR={frontend}\nREDIS_STARTUP_ERROR_HARD_KILL=false\n"
    )
    return Proc(
        [str(BIN / "emq-scheduler"), "-C", str(conf)], env={"EVENTMQ_CONFIG_FILE": str(conf)}
    )


def run_reference_client(
    addr: str,
    job: str,
    args: list[Any],
    kwargs: dict[str, Any],
    *options: str,
    timeout: float = 30.0,
) -> tuple[str, list[list[str]]]:
    """Send one job with the reference client; returns (msgid, frames it received)."""
    proc = Proc(
        [
            sys.executable,
            "-m",
            "tests.system.interop.reference_client",
            "--addr",
            addr,
            "--job",
            job,
            "--args",
            json.dumps(args),
            "--kwargs",
            json.dumps(kwargs),
            *options,
        ]
    )
    try:
        proc.popen.wait(timeout)
        output = proc.output()
    finally:
        code = proc.stop()
    assert code == 0, f"reference client failed ({code}):\n{output}"
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    msgid = next(line["sent"] for line in lines if "sent" in line)
    return msgid, [line["frames"] for line in lines if "frames" in line]


# -- fixtures ------------------------------------------------------------------


@pytest.fixture
def records_file(tmp_path: Path) -> Path:
    """A fresh file for ``refjobs`` jobs to record themselves in."""
    return tmp_path / "records.jsonl"


@pytest.fixture
def use_broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """Point our client (``@job(...).delay()``) at a router frontend via ``EMQ_BROKER_ADDR``."""

    def use(addr: str) -> None:
        close_clients()
        monkeypatch.setenv("EMQ_BROKER_ADDR", addr)
        monkeypatch.delenv("EMQ_EAGER", raising=False)
        config.reset()

    yield use
    close_clients()
    monkeypatch.undo()
    config.reset()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("interop")


@contextmanager
def router_with_jobmanager(
    router: Router, start_jobmanager: Callable[[str], Proc]
) -> Iterator[tuple[Router, Proc]]:
    """``router`` and the job manager ``start_jobmanager(router.backend)`` starts;
    both stopped afterwards (the router also when the job manager fails to start)."""
    try:
        jobmanager = start_jobmanager(router.backend)
        try:
            yield router, jobmanager
        finally:
            jobmanager.stop()
    finally:
        router.stop()


@contextmanager
def our_router_with_reference_jobmanager(
    workdir: Path, router_env: dict[str, str] | None = None
) -> Iterator[tuple[Router, Proc]]:
    """Our router (``router_env`` added to its environment) with the reference job
    manager (-Q default -J 2) connected; both stopped afterwards."""
    with router_with_jobmanager(
        start_our_router(router_env), lambda backend: start_reference_jobmanager(backend, workdir)
    ) as stack:
        yield stack


@pytest.fixture(scope="module")
def reference_router_stack(workdir: Path) -> Iterator[tuple[Router, Proc]]:
    """The reference router with our job manager (email:30, default:10; 2 processes)."""
    with router_with_jobmanager(start_reference_router(workdir), start_our_jobmanager) as stack:
        yield stack


@pytest.fixture(scope="module")
def our_stack() -> Iterator[tuple[Router, Proc]]:
    """Our router with our job manager (email:30, default:10; 2 processes)."""
    with router_with_jobmanager(start_our_router(), start_our_jobmanager) as stack:
        yield stack
