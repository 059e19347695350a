"""Processes and admin calls the throughput benchmark uses (ours, the reference's, raw zmq).

Every process is a subprocess on loopback with its output in a temp file;
:class:`Proc` stops it with SIGTERM (then SIGKILL). Nothing here imports the
reference eventmq: it is driven through its console scripts and a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import zmq

from benchmarks._ports import tcp_addr as tcp_addr

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PYTHON = sys.executable


_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """A memory figure of ``pid`` from /proc/PID/status in MiB (0 if it is gone):
    resident now (``VmRSS``), or the most it was resident so far (``VmHWM``)."""
    try:
        found = re.search(rf"^{field}:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
    except OSError:
        return 0.0
    return int(found.group(1)) / 1024 if found else 0.0


def child_pids(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc), in pid order."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return sorted(found)


def cmdline(pid: int) -> str:
    """The command line of process ``pid`` ("" if it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class CpuMeter:
    """CPU seconds used by named processes (and this one, as ``client``) between
    :meth:`start` and :meth:`per_job`, in microseconds per job."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.before: dict[str, float] = {}

    def _now(self) -> dict[str, float]:
        now = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        now["client"] = sum(os.times()[:2])
        return now

    def start(self) -> None:
        self.before = self._now()

    def per_job(self, jobs: int) -> dict[str, float]:
        after = self._now()
        used = {name: (after[name] - self.before[name]) * 1e6 / max(jobs, 1) for name in after}
        used["total"] = sum(used.values())
        return {name: round(value, 1) for name, value in used.items()}


def wait_until(condition: Callable[[], Any], timeout: float, what: str, poll: float = 0.01) -> Any:
    """Poll ``condition`` until truthy (returned) or raise ``TimeoutError`` naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(poll)


class Proc:
    """A subprocess with its combined output in a temp file."""

    def __init__(self, args: Sequence[str], env: dict[str, str] | None = None) -> None:
        self.args = list(args)
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed in stop()
            prefix="emq-bench-", suffix=".log", delete=False
        )
        full_env = dict(os.environ)
        full_env["PYTHONUNBUFFERED"] = "1"
        full_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ROOT), full_env.get("PYTHONPATH", "")) if p
        )
        # Journals of benchmark routers go to a temporary directory, not ./var.
        full_env.setdefault("EMQ_JOURNAL_PATH", str(Path(self.log.name).with_suffix(".journal")))
        full_env.update(env or {})
        self.popen = subprocess.Popen(
            self.args, stdout=self.log, stderr=subprocess.STDOUT, env=full_env, cwd=ROOT
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def wait_output(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        def check() -> re.Match[str] | None:
            match = re.search(pattern, self.output())
            if match is None and self.popen.poll() is not None:
                raise RuntimeError(
                    f"{self.args[:3]} exited ({self.popen.returncode}) before {pattern!r}:\n"
                    + self.output()[-3000:]
                )
            return match

        return wait_until(check, timeout, f"{pattern!r} from {self.args[:3]}")  # type: ignore[no-any-return]

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout)

    def stop(self, timeout: float = 10.0) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        self.log.close()
        os.unlink(self.log.name)
        return self.popen.returncode


class Admin:
    """A DEALER on a router's admin socket (ours or the reference's)."""

    def __init__(self, addr: str) -> None:
        self.socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.IDENTITY, f"bench-admin-{uuid.uuid4()}".encode())
        self.socket.connect(addr)

    def call(self, command: str, timeout: float = 10.0) -> dict[str, Any]:
        self.socket.send_multipart([b"", b"eMQP/1.0", command.encode(), uuid.uuid4().hex.encode()])
        if not self.socket.poll(int(timeout * 1000)):
            raise TimeoutError(f"no answer to admin {command} within {timeout}s")
        return json.loads(self.socket.recv_multipart()[-1])  # type: ignore[no-any-return]

    def processed(self, queue: str = "default") -> int:
        return int(self.call("STATUS")["processed_messages_by_queue"].get(queue, 0))

    def free_slots(self) -> int:
        workers = self.call("ROUTER_SHOW_WORKERS")["connected_workers"]
        return sum(int(w["available_slots"]) for w in workers.values())

    def close(self) -> None:
        self.socket.close(linger=0)


class Stack:
    """A router and one job manager, started together and stopped together."""

    def __init__(self, router: Proc, jobmanager: Proc, frontend: str, backend: str, admin: str):
        self.router, self.jobmanager = router, jobmanager
        self.frontend, self.backend, self.admin_addr = frontend, backend, admin
        self.admin = Admin(admin)

    def stop(self) -> None:
        self.admin.close()
        self.jobmanager.stop()
        self.router.stop()


def our_command(*args: str) -> list[str]:
    """``python -m django_eventmq ARGS``."""
    return [PYTHON, "-m", "django_eventmq", *args]


def start_ours(concurrency: int = 2, prefetch: int | None = None) -> Stack:
    """Our router and one job manager running ``benchmarks.noop_jobs``
    (``prefetch`` None: the PREFETCH setting's default)."""
    frontend, backend, admin = tcp_addr(), tcp_addr(), tcp_addr()
    router = Proc(
        our_command(
            "router",
            "--frontend",
            frontend,
            "--backend",
            backend,
            "--admin",
            admin,
        )
    )
    try:
        wait_until(lambda: "router ready" in router.output() or _died(router), 30, "our router")
        jobmanager = Proc(
            our_command(
                "jobmanager",
                "--broker",
                backend,
                "--queues",
                "default:10",
                "--concurrency",
                str(concurrency),
                "--job-module",
                "benchmarks.noop_jobs",
                *(["--prefetch", str(prefetch)] if prefetch is not None else []),
            )
        )
    except BaseException:
        router.stop()
        raise
    stack = Stack(router, jobmanager, frontend, backend, admin)
    try:
        jobmanager.wait_output("jobmanager connected to", 30)
        wait_until(lambda: stack.admin.free_slots() >= concurrency, 30, "READY from our workers")
    except BaseException:
        stack.stop()
        raise
    return stack


def start_router_only() -> tuple[Proc, str, str]:
    """Our router alone; returns (process, frontend, admin)."""
    frontend, backend, admin = tcp_addr(), tcp_addr(), tcp_addr()
    router = Proc(
        our_command("router", "--frontend", frontend, "--backend", backend, "--admin", admin)
    )
    try:
        wait_until(lambda: "router ready" in router.output() or _died(router), 30, "our router")
    except BaseException:
        router.stop()
        raise
    return router, frontend, admin


def start_reference(workdir: Path, concurrency: int = 2) -> Stack:
    """The reference router and job manager (``-J concurrency``), jobs from ``benchmarks``."""
    frontend, backend, admin = tcp_addr(), tcp_addr(), tcp_addr()
    conf = workdir / "eventmq.conf"
    # WAL must be set: the reference router creates its directory even with the WAL off.
    conf.write_text(
        "[global]\n"
        f"FRONTEND_ADDR={frontend}\nBACKEND_ADDR={backend}\nADMINISTRATIVE_ADDR={admin}\n"
        f"WAL={workdir / 'wal.log'}\n\n[jobmanager]\n"
    )
    env = {"EVENTMQ_CONFIG_FILE": str(conf)}
    router = Proc([str(BIN / "emq-router"), "-C", str(conf)], env=env)
    try:
        router.wait_output("Listening for administrative commands", 30)
        jobmanager = Proc(
            [
                *(str(BIN / "emq-jobmanager"), "-C", str(conf), "-B", backend),
                *("-Q", "default", "-J", str(concurrency)),
            ],
            env=env,
        )
    except BaseException:
        router.stop()
        raise
    stack = Stack(router, jobmanager, frontend, backend, admin)
    try:
        # Its workers start after the router's first HEARTBEAT (every 3 s).
        wait_until(
            lambda: stack.admin.free_slots() >= concurrency, 30, "READY from reference workers"
        )
    except BaseException:
        stack.stop()
        raise
    return stack


def _died(proc: Proc) -> bool:
    if proc.popen.poll() is not None:
        raise RuntimeError(f"{proc.args[:4]} exited:\n{proc.output()[-3000:]}")
    return False


def run_json(args: Sequence[str], timeout: float, env: dict[str, str] | None = None) -> Any:
    """Run a helper subprocess and return the JSON of its last output line."""
    proc = Proc(args, env=env)
    try:
        proc.wait(timeout)
        out = proc.output()
    finally:
        proc.stop()
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"{list(args)[:4]} printed no result:\n{out[-3000:]}")
    return json.loads(lines[-1])
