"""A job that proves it ran: it appends its arguments as one JSON line to a file.

Registered with ``@job`` so our job manager runs it (``--job-module``); the
reference job manager imports this module by its path and calls ``record``.
The file is named by the ``out`` keyword so every test gets its own.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from django_eventmq.client.jobs import job


def append_record(out: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Append ``{"args", "kwargs", "pid"}`` to ``out`` as one line; return it."""
    entry = {"args": list(args), "kwargs": kwargs, "pid": os.getpid()}
    line = json.dumps(entry, sort_keys=True) + "\n"
    # One write on an O_APPEND descriptor: lines from concurrent workers never interleave.
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    return entry


@job
def record(*args: Any, out: str, **kwargs: Any) -> dict[str, Any]:
    """Record the call in ``out`` and return what was recorded (minus the pid)."""
    entry = append_record(out, args, kwargs)
    return {"args": entry["args"], "kwargs": entry["kwargs"]}


@job(queue="email", reply_requested=True)
def record_email(*args: Any, out: str, **kwargs: Any) -> dict[str, Any]:
    """Like :func:`record`, queued on ``email`` and asking for a reply."""
    entry = append_record(out, args, kwargs)
    return {"args": entry["args"], "kwargs": entry["kwargs"]}


@job
def record_then_wait(*args: Any, out: str, gate: str) -> None:
    """Record the call in ``out``, then keep running until the file ``gate`` exists
    (at most a minute): a job that keeps its job manager busy for as long as a test needs."""
    append_record(out, args, {})
    deadline = time.monotonic() + 60
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.02)


@job(timeout=3)
def record_or_die(*args: Any, out: str, marker: str) -> None:
    """The first run (no file ``marker`` yet) creates it and kills its worker process
    (no outcome, no clean exit); a later run records the call in ``out``."""
    if not os.path.exists(marker):
        Path(marker).touch()
        os._exit(1)
    append_record(out, args, {})
