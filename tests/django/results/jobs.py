"""Jobs and Django tasks the lifecycle tests queue (module-level, so workers can import them)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from django_eventmq import job, progress


def note(path: str, text: str) -> None:
    """Append a line to ``path`` (how a job tells the test what it did)."""
    with open(path, "a") as f:
        f.write(text + "\n")


def lines(path: str | Path) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except FileNotFoundError:
        return []


@job(reply_requested=True)
def add(a: int, b: int) -> int:
    return a + b


@job(reply_requested=True)
def explode(message: str) -> None:
    raise KeyError(message)


@job
def fire_and_forget(n: int) -> int:
    return n


@job(guarantee=True)
def important(n: int) -> int:
    return n


@job(reply_requested=True, guarantee=True)
def important_with_reply(n: int) -> int:
    return n * 10


@job(reply_requested=True, retry_count=2)
def flaky(path: str, failures: int) -> str:
    """Fails its first ``failures`` runs, then succeeds; each run notes itself in ``path``."""
    note(path, f"run {os.getpid()}")
    if len(lines(path)) <= failures:
        raise RuntimeError(f"failure {len(lines(path))}")
    return "finally"


@job(reply_requested=True, retry_count=1)
def always_fails(path: str) -> None:
    note(path, "run")
    raise RuntimeError("always")


@job(reply_requested=True, retry_count=3)
def always_raises(path: str, n: int) -> None:
    """Raises on every run (four in all); each run notes ``n`` and its process in ``path``."""
    note(path, f"{n} {os.getpid()}")
    raise RuntimeError(f"always {n}")


@job(reply_requested=True, timeout=1)
def sleeps_too_long(path: str, seconds: float = 30.0) -> str:
    note(path, f"start {os.getpid()}")
    time.sleep(seconds)
    note(path, "done")
    return "woke"


@job(reply_requested=True)
def slow(path: str, seconds: float, label: str = "") -> str:
    note(path, f"start {label} {os.getpid()}")
    time.sleep(seconds)
    note(path, f"done {label}")
    return label


@job(reply_requested=True)
def marker(path: str, label: str) -> str:
    note(path, label)
    return label


@job(reply_requested=True)
def gate(path: str, release: str) -> str:
    """Occupies its worker until the file ``release`` exists (or a minute passed)."""
    note(path, f"gate started {os.getpid()}")
    deadline = time.monotonic() + 60
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.02)
    note(path, "gate done")
    return "opened"


@job(reply_requested=True)
def gate_with_progress(path: str, release: str) -> str:
    """Reports progress, then occupies its worker until the file ``release`` exists."""
    progress({"at": "waiting"})
    return str(gate.func(path, release))
