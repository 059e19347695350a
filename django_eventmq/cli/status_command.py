"""The ``emq_status`` command: one router (:mod:`.status`) or several
(:mod:`.status_groups`), once or every ``--interval``. Never imports Django."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

from django_eventmq.cli import status_groups
from django_eventmq.cli.status import CLEAR, Ask, Snapshot, connectable, fetch, render, summarize
from django_eventmq.errors import ConfigurationError, EventMQError
from django_eventmq.runtime import admin_client, config
from django_eventmq.runtime.settings import Settings


def admin_targets(option: str | None, admin_addr: str, settings: Settings) -> str:
    """Which routers to read: ``option`` (``--admin``), else the STATUS_ADMIN_ADDRS setting,
    else ``admin_addr`` (the ADMIN_ADDR setting: one router)."""
    return option or settings.status_admin_addrs or admin_addr


Previous = dict[str, Snapshot]


def frame(
    admin_addr: str,
    previous: Mapping[str, Snapshot] | None,
    *,
    as_json: bool,
    monitor: bool,
    timeout: float,
    jobs: bool = False,
    ask: Ask = admin_client.ask,
) -> tuple[str, Previous, bool]:
    """One view (text or one JSON line), the snapshots that answered (by address, for the
    next frame's throughput) and whether it is healthy: the router answered or, with several,
    every shard has a leader that answered."""
    previous = previous or {}
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    groups = status_groups.admin_groups(admin_addr, "--admin")
    if groups is None:
        snap = fetch(admin_addr, timeout=timeout, monitor=monitor, jobs=jobs, ask=ask)
        summary = summarize(snap, previous.get(snap.admin_addr))
        answered = {} if snap.error else {snap.admin_addr: snap}
        text = render(summary, title=f"router {snap.admin_addr} at {stamp}")
    else:
        snaps = status_groups.fetch_groups(
            groups, timeout=timeout, monitor=monitor, jobs=jobs, ask=ask
        )
        summary = status_groups.summarize_groups(snaps, previous)
        answered = {s.admin_addr: s for members in snaps for s in members if not s.error}
        text = status_groups.render_groups(summary, title=f"routers {summary['router']} at {stamp}")
    if as_json:
        text = json.dumps(summary, sort_keys=True) + "\n"
    return text, answered, bool(summary["reachable"])


def run(
    admin_addr: str,
    out: TextIO,
    *,
    as_json: bool = False,
    monitor: bool = False,
    watch: bool = False,
    interval: float = 2.0,
    timeout: float = 2.0,
    frames: int | None = None,
    jobs: bool = False,
    ask: Ask = admin_client.ask,
) -> int:
    """Print the status once (exit 1 if the router did not answer, or with several, if a
    shard has no leader that answered), or every ``interval``.

    ``admin_addr`` is one address or a list (``a,b;c``: ',' between the members
    of a router group, ';' between groups). With ``watch`` on a terminal each
    frame clears the screen and redraws in place; otherwise frames follow one
    another (a blank line between text frames, one JSON object per line).
    Stops on Ctrl-C or after ``frames``.
    """
    tty = watch and not as_json and out.isatty()
    previous: Previous = {}
    shown = 0
    code = 0
    try:
        while True:
            text, previous, healthy = frame(
                admin_addr,
                previous,
                as_json=as_json,
                monitor=monitor,
                timeout=timeout,
                jobs=jobs,
                ask=ask,
            )
            if not watch:
                code = 0 if healthy else 1
                out.write(text)
                out.flush()
                return code
            out.write((CLEAR + text) if tty else text + ("" if as_json else "\n"))
            out.flush()
            shown += 1
            if frames is not None and shown >= frames:
                return 0
            time.sleep(interval)  # the refresh period, not a wait for an event
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:
        # The reader left (emq_status | head): stop quietly, as a pipe's writer does.
        _discard(out)
        return code


def _discard(out: TextIO) -> None:
    """Point ``out``'s file at /dev/null: what is still buffered, what the command writes
    after, and Python's flush at exit go nowhere instead of raising BrokenPipeError again."""
    try:
        fd = out.fileno()
    except (OSError, ValueError):
        return  # not a file (a StringIO): nothing is flushed at exit
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def run_options(
    options: Mapping[str, Any],
    admin_addr: str,
    out: TextIO,
    *,
    settings: Settings | None = None,
    err: TextIO | None = None,
) -> int:
    """:func:`run` with the options of :func:`.options.add_status_arguments`; the routers are
    :func:`admin_targets` (``settings``: this process's by default, read only when
    ``--admin`` is not given). A bad list that reached it unchecked (``call_command``'s
    keyword arguments skip the parser) is one line on ``err``, exit 2."""
    given = options.get("admin")
    admin = given or admin_targets(
        None, admin_addr, config.get_settings() if settings is None else settings
    )
    try:
        status_groups.admin_groups(admin, "--admin" if given else "STATUS_ADMIN_ADDRS")
    except ConfigurationError as exc:
        (err or sys.stderr).write(f"emq_status: {exc}\n")
        return 2
    if options.get("stop"):
        return stop(admin, out, err or sys.stderr, float(options.get("timeout") or 2.0), settings)
    return run(
        admin,
        out,
        as_json=bool(options.get("json")),
        monitor=bool(options.get("monitor")),
        jobs=bool(options.get("jobs")),
        watch=bool(options.get("watch")),
        interval=float(options.get("interval") or 2.0),
        timeout=float(options.get("timeout") or 2.0),
    )


def stop(admin: str, out: TextIO, err: TextIO, timeout: float, settings: Settings | None) -> int:
    """``--stop``: DISCONNECT one router (with its admin token); 1 when it did not stop."""
    if admin_client.is_admin_list(admin):
        err.write("emq_status: --stop stops one router: name its admin address (--admin)\n")
        return 2
    addr = connectable(admin)
    try:
        admin_client.stop_router(addr, timeout, settings=settings)
    except EventMQError as exc:
        err.write(f"emq_status: {exc}\n")
        return 1
    out.write(f"router at {addr} is stopping\n")
    return 0
