"""Processes, jobs and admin calls for the chaos and flood tests.

Their producer is our own client's guaranteed bulk send
(``Client.send_many``), so the tests measure what users get.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import zmq

from tests.support import Proc, python_module, wait_for

JOB_PATH = "tests.system.chaos.jobs"
V = b"eMQP/1.0"


def body(token: str, work: float = 0.0) -> bytes:
    return json.dumps(
        ["run", {"path": JOB_PATH, "callable": "record", "args": [token, work], "kwargs": {}}]
    ).encode()


def admin_call(addr: str, command: str, timeout: float = 10.0) -> dict[str, Any]:
    """One admin command's JSON answer (a fresh DEALER each time: the router may restart)."""
    ctx: zmq.Context[Any] = zmq.Context.instance()
    sock: zmq.Socket[Any] = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.IDENTITY, f"admin-{os.getpid()}-{time.monotonic_ns()}".encode())
    try:
        sock.connect(addr)
        sock.send_multipart([b"", V, command.encode(), b"admin-call"])
        if not sock.poll(int(timeout * 1000)):
            raise AssertionError(f"no answer to {command} from {addr} within {timeout}s")
        return json.loads(sock.recv_multipart()[4])  # type: ignore[no-any-return]
    finally:
        sock.close(linger=0)


#: ``EMQ_CHAOS_LOG=DEBUG`` to see every job's way in the processes' output.
LOG_LEVEL = os.environ.get("EMQ_CHAOS_LOG", "INFO")


def start_router(frontend: str, backend: str, admin: str, journal: Path, **env: str) -> Proc:
    proc = Proc(
        python_module(
            "router",
            "--frontend",
            frontend,
            "--backend",
            backend,
            "--admin",
            admin,
            "--log-level",
            LOG_LEVEL,
        ),
        env={"EMQ_JOURNAL_PATH": str(journal), **env},
    )
    try:
        proc.wait_output(r"router ready")
    except BaseException:
        proc.stop()
        raise
    return proc


def start_jobmanager(backend: str, concurrency: int = 2, **env: str) -> Proc:
    return Proc(
        python_module(
            "jobmanager",
            "--broker",
            backend,
            "--concurrency",
            str(concurrency),
            "--job-module",
            JOB_PATH,
            "--log-level",
            LOG_LEVEL,
        ),
        env=env,
    )


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (Linux /proc)."""
    found: list[int] = []
    task_dir = Path(f"/proc/{pid}/task")
    try:
        tasks = list(task_dir.iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            found.extend(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
    return found


def descendants(pid: int) -> list[tuple[int, str]]:
    """``(pid, start time)`` of every descendant: the start time tells a reused pid apart."""
    result: list[tuple[int, str]] = []
    todo = [pid]
    while todo:
        for child in children(todo.pop()):
            started = start_time(child)
            if started:
                result.append((child, started))
            todo.append(child)
    return result


def start_time(pid: int) -> str:
    """When ``pid`` started (field 22 of /proc/PID/stat), or "" if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[-1].split()[19]


def kill_if_same(pid: int, started: str) -> None:
    """SIGKILL ``pid`` only if it is still the process that started at ``started``."""
    if start_time(pid) == started:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def memory_kib(pid: int, field: str = "VmHWM") -> int:
    """A memory figure of a process from /proc/PID/status (VmHWM: peak RSS), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for pid {pid}")


def recorded(path: Path) -> list[str]:
    if not path.exists():
        return []
    return path.read_text().split()


def wait_recorded(path: Path, expected: set[str], timeout: float) -> list[str]:
    def check() -> list[str] | None:
        lines = recorded(path)
        return lines if expected <= set(lines) else None

    try:
        return wait_for(check, timeout, "every job to run", poll=0.2)  # type: ignore[no-any-return]
    except AssertionError:
        missing = expected - set(recorded(path))
        raise AssertionError(
            f"{len(missing)} job(s) never ran, e.g. {sorted(missing)[:5]}"
        ) from None
