"""Shared test helpers: free loopback addresses, waiting on conditions, processes.

Nothing here sleeps to wait for an event: :func:`wait_for` polls a condition
until a deadline and fails with a message naming what did not happen.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# The port picker is shared with the benchmarks, whose classes the tests run too.
from benchmarks._ports import free_port as free_port
from benchmarks._ports import tcp_addr as tcp_addr

ROOT = Path(__file__).resolve().parent.parent


def wait_for(
    condition: Callable[[], Any], timeout: float = 10.0, what: str = "condition", poll: float = 0.01
) -> Any:
    """Poll ``condition`` until it returns something truthy; return that value.

    Raises ``AssertionError`` naming ``what`` when the deadline passes.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(poll)


class Proc:
    """A child process whose combined output goes to a file we can search."""

    def __init__(self, args: Sequence[str], env: dict[str, str] | None = None, cwd: Path = ROOT):
        self.args = list(args)
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed in stop()
            prefix="emq-proc-", suffix=".log", delete=False
        )
        full_env = dict(os.environ)
        full_env.setdefault("PYTHONUNBUFFERED", "1")
        full_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ROOT), full_env.get("PYTHONPATH", "")) if p
        )
        full_env.update(env or {})
        self.popen = subprocess.Popen(
            self.args, stdout=self.log, stderr=subprocess.STDOUT, env=full_env, cwd=cwd
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def wait_output(self, pattern: str, timeout: float = 20.0) -> re.Match[str]:
        """Wait until the output matches ``pattern`` (a regex); fail if the process died."""

        def check() -> re.Match[str] | None:
            match = re.search(pattern, self.output())
            if match is None and self.popen.poll() is not None:
                raise AssertionError(
                    f"process {self.args} exited with {self.popen.returncode} before "
                    f"printing {pattern!r}; output:\n{self.output()}"
                )
            return match

        return wait_for(check, timeout, f"output {pattern!r} from {self.args}")  # type: ignore[no-any-return]

    def signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, sig)

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM, then SIGKILL after ``timeout``; returns the exit code."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        self.log.close()
        return self.popen.returncode


def python_module(*args: str) -> list[str]:
    """Command line for ``python -m django_eventmq ARGS``."""
    return [sys.executable, "-m", "django_eventmq", *args]


def clean_environ() -> dict[str, str]:
    """This process's environment without ``EMQ_*`` (a test sets the ones it means)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}


def run_checked(args: Sequence[str | Path], *, timeout: float = 120, **kwargs: Any) -> str:
    """Run a command that must succeed and return its stdout (else fail with its output)."""
    done = subprocess.run(
        args, capture_output=True, text=True, timeout=timeout, check=False, **kwargs
    )
    assert done.returncode == 0, f"{[str(a) for a in args]}:\n{done.stdout}{done.stderr}"
    return done.stdout


def migrated_env(env: dict[str, str]) -> dict[str, str]:
    """Run ``django migrate`` with ``env`` (settings and database) and return ``env``."""
    run_checked(
        [sys.executable, "-m", "django", "migrate", "--noinput"],
        cwd=ROOT,
        env={**clean_environ(), "PYTHONPATH": str(ROOT), **env},
    )
    return env


class ResultStack:
    """Processes of a test stack that record ``JobResult`` rows into the SQLite file ``db``."""

    db: Path
    procs: list[Proc]

    def logs(self) -> str:
        return "\n".join(f"--- {p.args[3]}\n{p.output()}" for p in self.procs)

    def row(self, msgid: str, table: str = "django_eventmq_jobresult") -> dict[str, Any] | None:
        """The row of ``msgid`` in ``table`` (the results table unless told), or None."""
        with sqlite3.connect(self.db, timeout=10) as conn:
            conn.row_factory = sqlite3.Row
            found = conn.execute(f"SELECT * FROM {table} WHERE msgid = ?", (msgid,)).fetchone()
        return dict(found) if found else None

    def wait_row(
        self, msgid: str, check: Callable[[dict[str, Any]], bool], what: str
    ) -> dict[str, Any]:
        """The row of ``msgid`` once ``check(row)`` holds (rows are written in batches)."""

        def ready() -> dict[str, Any] | None:
            found = self.row(msgid)
            return found if found and check(found) else None

        try:
            return wait_for(ready, 30, f"{what} recorded for {msgid}")  # type: ignore[no-any-return]
        except AssertionError as exc:
            raise AssertionError(f"{exc}; row now {self.row(msgid)}\n{self.logs()}") from None

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()


def result_record(
    msgid: str, status: str, *, job: str, args: list[Any], attempt: int = 1, **extra: Any
) -> dict[str, Any]:
    """A record as job managers hand them to ``record_results`` (``extra`` overrides)."""
    record: dict[str, Any] = {
        "msgid": msgid,
        "queue": "default",
        "job": job,
        "args": args,
        "kwargs": {},
        "status": status,
        "value": None,
        "error": None,
        "attempt": attempt,
        "jobmanager": "jm-1",
        "pid": 4242,
        "started": None,
        "finished": None,
    }
    record.update(extra)
    return record


def receive_request(channel: Any, timeout_ms: int = 10_000) -> tuple[bytes, Any]:
    """The next message a raw ROUTER ``channel`` (a :class:`~.transport.Channel`)
    got from a client of ours, which must be a REQUEST; returns (identity, request).

    The FEATURES a client sends first is skipped: a broker that does not answer
    it (as the reference router does not) gets plain REQUESTs.
    """
    from django_eventmq.protocol import Features, Request

    while True:
        assert channel.poll(timeout_ms), "the broker received nothing"
        identity, _frames, message = channel.recv()
        if not isinstance(message, Features):
            break
    assert isinstance(message, Request), message
    return identity, message
