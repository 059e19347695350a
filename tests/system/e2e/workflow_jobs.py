"""Jobs of the workflow tests. ``log`` arguments name files each run appends a line to."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from django_eventmq import job


def _note(log: str | None, line: str) -> None:
    if log:
        with open(log, "a") as out:
            out.write(line + "\n")


@job
def add(x: int, y: int, log: str | None = None) -> int:
    _note(log, f"add {x} {y}")
    return x + y


@job
def double(x: int, log: str | None = None) -> int:
    _note(log, f"double {x}")
    return 2 * x


@job
def total(values: list[int], log: str | None = None) -> int:
    _note(log, f"total {values}")
    return sum(values)


@job
def boom(x: Any, log: str | None = None) -> None:
    _note(log, f"boom {x}")
    raise ValueError(f"boom at {x}")


@job(retry_count=2, retry_on=KeyError)
def picky(x: Any, log: str | None = None) -> None:
    """Retried for a KeyError only; raises a ValueError."""
    _note(log, f"picky {x}")
    raise ValueError(f"picky at {x}")


@job
def gated(x: Any, gate: str, log: str, tag: str) -> Any:
    """Note ``start <tag>``, wait (at most 60 s) until the file ``gate`` exists, note ``done``."""
    _note(log, f"start {tag}")
    deadline = time.monotonic() + 60
    while not Path(gate).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gate {gate} never opened")
        time.sleep(0.02)
    _note(log, f"done {tag}")
    return x
