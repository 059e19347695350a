"""What ``emq_status`` shows: a router's admin answers, summarised and drawn as text tables.

:func:`fetch` asks a router's admin socket STATUS, ROUTER_SHOW_WORKERS,
ROUTER_SHOW_SCHEDULERS (and MONITOR); :func:`summarize` turns two successive
snapshots into plain rows (throughput needs the previous one); :func:`render`
draws them. Everything but :func:`fetch` and ``--watch`` is pure, so the
tables are tested without sockets. Several routers (``--admin 'a,b;c'``) are
:mod:`.status_groups`, built on these pieces; :mod:`.status_command` is the
command, which reads either. Never imports Django.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django_eventmq.errors import BrokerUnavailable
from django_eventmq.protocol import constants as C
from django_eventmq.runtime import admin_client

#: Clears the terminal and moves the cursor home: each ``--watch`` frame redraws in place.
CLEAR = "\x1b[H\x1b[2J"
#: Shown instead of a value the router did not report.
NONE = "-"

Ask = Callable[[str, str, float], dict[str, Any]]


@dataclass(frozen=True)
class Snapshot:
    """The router's admin answers at one moment (``taken_at``: local monotonic seconds)."""

    admin_addr: str
    taken_at: float
    status: dict[str, Any] = field(default_factory=dict)
    workers: dict[str, Any] = field(default_factory=dict)
    schedulers: dict[str, Any] = field(default_factory=dict)
    monitor: dict[str, Any] | None = None
    #: The jobs handed out (the ROUTER_SHOW_JOBS answer), when asked for (``--jobs``).
    jobs: dict[str, Any] | None = None
    #: Why the router could not be read ("" when it answered).
    error: str = ""


def connectable(addr: str) -> str:
    """A bound address (``tcp://*:N``, ``tcp://0.0.0.0:N``) as one a client can connect to."""
    for wildcard in ("tcp://*:", "tcp://0.0.0.0:"):
        if addr.startswith(wildcard):
            return "tcp://127.0.0.1:" + addr[len(wildcard) :]
    return addr


def fetch(
    admin_addr: str,
    *,
    timeout: float = 2.0,
    monitor: bool = False,
    jobs: bool = False,
    ask: Ask = admin_client.ask,
    clock: Callable[[], float] = time.monotonic,
) -> Snapshot:
    """Ask the router everything the status view shows; ``error`` says if it did not answer."""
    addr = connectable(admin_addr)
    try:
        return Snapshot(
            admin_addr=addr,
            taken_at=clock(),
            status=ask(addr, C.STATUS, timeout),
            workers=ask(addr, C.ROUTER_SHOW_WORKERS, timeout),
            schedulers=ask(addr, C.ROUTER_SHOW_SCHEDULERS, timeout),
            monitor=ask(addr, C.MONITOR, timeout) if monitor else None,
            jobs=ask(addr, C.ROUTER_SHOW_JOBS, timeout) if jobs else None,
        )
    except (BrokerUnavailable, ValueError) as exc:
        # ValueError: an answer that is not JSON (json.JSONDecodeError).
        return Snapshot(admin_addr=addr, taken_at=clock(), error=f"router unreachable: {exc}")


# -- summary: plain rows, also the --json output and the dashboard's data -------


def _ints(mapping: Any) -> dict[str, int]:
    if not isinstance(mapping, Mapping):
        return {}
    return {str(k): int(v) for k, v in mapping.items() if isinstance(v, int | float)}


def _queue_names(snap: Snapshot) -> list[str]:
    s = snap.status
    names: set[str] = set()
    for key in (
        "waiting_messages_by_queue",
        "inflight_messages_by_queue",
        "processed_messages_by_queue",
        "waiting_since_by_queue",
    ):
        names.update(_ints(s.get(key)))
    names.update(snap.workers.get("connected_queues") or {})
    if snap.monitor:
        names.update(snap.monitor.get("per_queue") or {})
    return sorted(names)


def _heartbeat_ago(hb: Any, router_now: float | None) -> float | None:
    """Seconds since the router last heard a peer, if the router's clock is known."""
    if router_now is None or not isinstance(hb, int | float):
        return None
    ago = router_now - float(hb)
    # The router's "hb" is its monotonic clock: only comparable on one host.
    return ago if 0 <= ago < 86_400 else None


def summarize(
    snap: Snapshot, previous: Snapshot | None = None, *, router_now: float | None = None
) -> dict[str, Any]:
    """Rows for the queues, job managers and schedulers, and totals, as plain data.

    ``router_now`` is the router's monotonic clock, to say how long ago peers
    were heard: the answer's ``now`` when the router sends one, else ``taken_at``
    (right when router and caller share a host). Throughput (jobs/s) is the
    processed count's change since ``previous``.
    """
    status = snap.status
    waiting = _ints(status.get("waiting_messages_by_queue"))
    inflight = _ints(status.get("inflight_messages_by_queue"))
    processed = _ints(status.get("processed_messages_by_queue"))
    since = _ints(status.get("waiting_since_by_queue"))
    latency = _ints(status.get("latency_messages_by_queue"))
    max_latency = _ints(status.get("max_latency_messages_by_queue"))
    # The router's job counters (STATUS extras of ours; a reference router has none).
    counters = {
        key: _ints(status.get(f"{key}_messages_by_queue"))
        for key in ("received", "dispatched", "failed", "retried")
    }
    per_queue_monitor = (snap.monitor or {}).get("per_queue") or {}
    expired = _ints(status.get("expired_messages_by_queue"))
    rates: dict[str, float] = {}
    elapsed = snap.taken_at - previous.taken_at if previous and not previous.error else 0.0
    if previous is not None and elapsed > 0:
        before = _ints(previous.status.get("processed_messages_by_queue"))
        rates = {q: max(0, n - before.get(q, 0)) / elapsed for q, n in processed.items()}
    queues = []
    for name in _queue_names(snap):
        row: dict[str, Any] = {
            "queue": name,
            "waiting": waiting.get(name, 0),
            "in_flight": inflight.get(name, 0),
            "waiting_since_ms": since.get(name),
            "processed": processed.get(name, 0),
            "jobs_per_s": rates.get(name, 0.0) if rates or elapsed > 0 else None,
            "age_mean_ms": latency.get(name),
            "age_max_ms": max_latency.get(name),
            **{key: counts.get(name, 0) for key, counts in counters.items()},
        }
        if expired.get(name):
            row["expired"] = expired[name]  # dropped at hand-out, past their expires time
        if name in per_queue_monitor:
            row["monitor"] = dict(per_queue_monitor[name])
        queues.append(row)

    clock = router_now if router_now is not None else _router_clock(snap)
    managers = []
    for name, info in sorted((snap.workers.get("connected_workers") or {}).items()):
        managers.append(
            {
                "name": name,
                "queues": [[int(w), str(q)] for w, q in info.get("queues", [])],
                "free_slots": info.get("available_slots"),
                "in_flight": info.get("inflight"),
                "heartbeat_ago_s": _heartbeat_ago(info.get("hb"), clock),
                # Why it takes no jobs now (its worker processes cannot start...).
                "trouble": str(info.get("trouble") or ""),
            }
        )
    schedulers = [
        {"name": name, "heartbeat_ago_s": _heartbeat_ago(info.get("hb"), clock)}
        for name, info in sorted((snap.schedulers.get("connected_schedulers") or {}).items())
    ]
    poisoned = status.get("poisoned_messages") or []
    totals = {
        "waiting": sum(waiting.values()),
        "in_flight": sum(inflight.values()),
        "processed": sum(processed.values()),
        "jobs_per_s": sum(rates.values()) if rates or elapsed > 0 else None,
        "requeued": status.get("requeued_messages", 0),
        "failed": sum(counters["failed"].values()),
        "retried": sum(counters["retried"].values()),
        "heartbeats_missed": status.get("heartbeats_missed", 0),
        # STATUS lists the first 100 poisoned jobs; ours also says how many there are.
        "poisoned": status.get(
            "poisoned_messages_total", len(poisoned) if isinstance(poisoned, list) else 0
        ),
        "buffered_schedule_messages": snap.schedulers.get("buffered_schedule_messages", 0),
    }
    summary: dict[str, Any] = {
        "router": snap.admin_addr,
        "reachable": not snap.error,
        "error": snap.error,
        "journal_failure": status.get("journal_failure"),
        # Queue -> jobs waiting on it that no connected job manager serves.
        "unserved_queues": _ints(status.get("unserved_queues")),
        "queues": queues,
        "job_managers": managers,
        "schedulers": schedulers,
        "totals": totals,
    }
    if "expired_messages_by_queue" in status:  # our router (not the reference)
        totals["expired"] = sum(expired.values())
    limits = rate_limits_summary(status)
    if limits is not None:
        summary["rate_limits"] = limits
    group = group_summary(status)
    if group is not None:
        summary["group"] = group
    if snap.monitor is not None:
        summary["monitor"] = snap.monitor
    if snap.jobs is not None:
        shown = list(snap.jobs.get("jobs") or [])
        summary["jobs"] = shown
        # The router answers with the oldest few hundred; how many there are in all.
        summary["jobs_total"] = int(snap.jobs.get("total", len(shown)))
    return summary


def rate_limits_summary(status: Mapping[str, Any]) -> dict[str, Any] | None:
    """STATUS's rate limits (docs/rate-limits.md): ``queues`` (limit, hand-outs in the
    current period, jobs held back now) and ``keys`` (limit, hand-outs); None if none."""
    queues = status.get("rate_limits_by_queue")
    keys = status.get("rate_limits_by_key")
    if not queues and not keys:
        return None
    return {
        "queues": dict(queues) if isinstance(queues, Mapping) else {},
        "keys": dict(keys) if isinstance(keys, Mapping) else {},
    }


def render_rate_limits(limits: Mapping[str, Any]) -> list[str]:
    """The rate-limit tables of ``emq_status``: per queue, then per rate key."""
    out = []
    if limits["queues"]:
        rows = [
            (q, v.get("limit") or "-", v.get("used", 0), v.get("held_back", 0))
            for q, v in sorted(limits["queues"].items())
        ]
        out += [table(("RATE-LIMITED QUEUE", "LIMIT", "USED", "HELD BACK"), rows), ""]
    if limits["keys"]:
        keys = [(k, v.get("limit"), v.get("used", 0)) for k, v in sorted(limits["keys"].items())]
        out += [table(("RATE KEY", "LIMIT", "USED"), keys), ""]
    return out


#: What STATUS says about a router group (``router/group.py``), as the summary keeps it.
GROUP_KEYS = (
    "group",
    "role",
    "member",
    "epoch",
    "leader",
    "leader_pid",
    "leader_since",
    "lease_expires",
    "failovers",
    "last_failover",
    "last_failover_seconds",
    "leadership_changes",
)


def group_summary(status: Mapping[str, Any]) -> dict[str, Any] | None:
    """The router group part of a STATUS answer (None: not a group member)."""
    if not status.get("group"):
        return None
    return {key: status.get(key) for key in GROUP_KEYS}


def _router_clock(snap: Snapshot) -> float | None:
    now = snap.workers.get("now", snap.status.get("now"))
    return float(now) if isinstance(now, int | float) else snap.taken_at


# -- text ------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], *, left: int = 1) -> str:
    """Columns padded to their widest cell; the first ``left`` columns left-aligned, the rest
    right."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = [
            cell.ljust(widths[i]) if i < left else cell.rjust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def duration(ms: float | None) -> str:
    """Milliseconds as a short human duration (``850ms``, ``12.5s``, ``3m04s``, ``2h05m``)."""
    if ms is None:
        return NONE
    if ms < 1000:
        return f"{int(ms)}ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def ago_text(seconds: float | None) -> str:
    return NONE if seconds is None else f"{duration(seconds * 1000)} ago"


def rate_text(value: float | None) -> str:
    return NONE if value is None else f"{value:.1f}"


def when_text(unix: Any) -> str:
    if not isinstance(unix, int | float):
        return NONE
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(unix))


def render_group(group: Mapping[str, Any]) -> list[str]:
    """The router group lines: role, leader, epoch, since, failovers."""
    role = str(group.get("role") or NONE)
    leader = group.get("leader") or NONE
    lines = [
        f"group {group.get('group')}: this router ({group.get('member')}) is the {role}; "
        f"leader {leader} (epoch {group.get('epoch') or NONE}) since "
        f"{when_text(group.get('leader_since'))}"
    ]
    seconds = group.get("last_failover_seconds")
    last = (
        f", last at {when_text(group.get('last_failover'))} ({seconds:.1f}s without a leader)"
        if isinstance(seconds, int | float)
        else ""
    )
    lines.append(f"failovers: {group.get('failovers') or 0}{last}")
    if role == "standby":
        lines.append("standby: binds no frontend or backend; it takes over if the leader fails")
    return lines


def unserved_warning(unserved: Mapping[str, int], where: str = "") -> str:
    waiting = ", ".join(f"{q} ({n} waiting)" for q, n in sorted(unserved.items()))
    return (
        f"WARNING: {where}no connected job manager serves {waiting}: "
        "start one that names the queue (--queues)"
    )


def _manager_cells(m: Mapping[str, Any]) -> tuple[object, ...]:
    """A job manager's row: name, queues, free slots, in flight, last heartbeat."""
    return (
        m["name"],
        ",".join(f"{q}:{w}" for w, q in m["queues"]),
        NONE if m["free_slots"] is None else m["free_slots"],
        NONE if m["in_flight"] is None else m["in_flight"],
        ago_text(m["heartbeat_ago_s"]),
    )


def managers_table(managers: Sequence[Mapping[str, Any]], *, by_shard: bool = False) -> str:
    """The job managers' table (``by_shard``: with each one's shard), or a line saying there
    are none."""
    if not managers:
        return "no job managers connected"
    shard = ("SHARD",) if by_shard else ()
    text = table(
        ("JOB MANAGER", *shard, "QUEUES (WEIGHT)", "FREE SLOTS", "IN FLIGHT", "LAST HEARTBEAT"),
        (
            (m["name"], *((m["shard"],) if by_shard else ()), *_manager_cells(m)[1:])
            for m in managers
        ),
    )
    troubled = [
        f"WARNING: job manager {m['name']} takes no jobs: {m['trouble']}"
        for m in managers
        if m.get("trouble")
    ]
    return "\n".join([text, *troubled])


def totals_text(t: Mapping[str, Any]) -> str:
    return (
        f"{t['waiting']} waiting, {t['in_flight']} in flight, {t['processed']} processed "
        f"({rate_text(t['jobs_per_s'])} jobs/s), {t['failed']} failed, {t['retried']} retried, "
        f"{t['requeued']} requeued, {t['poisoned']} poisoned"
        + (f", {t['expired']} expired" if t.get("expired") else "")
    )


def render(summary: Mapping[str, Any], *, title: str = "") -> str:
    """The summary as the ``emq_status`` text: queues, job managers, schedulers, totals."""
    head = title or f"router {summary['router']}"
    if not summary["reachable"]:
        return f"{head}\n{summary['error']}\n"
    queues = summary["queues"]
    out = [head, ""]
    group = summary.get("group")
    if group:
        out += [*render_group(group), ""]
        if group.get("role") == "standby":
            return "\n".join(out)
    if summary.get("journal_failure"):
        out += [f"JOURNAL CANNOT BE WRITTEN: {summary['journal_failure']}", ""]
    unserved = summary.get("unserved_queues") or {}
    if unserved:
        out += [unserved_warning(unserved), ""]
    if queues:
        out.append(
            table(
                (
                    "QUEUE",
                    "WAITING",
                    "IN FLIGHT",
                    "WAITING SINCE",
                    "PROCESSED",
                    "JOBS/S",
                    "AGE MEAN",
                    "AGE MAX",
                ),
                (
                    (
                        q["queue"],
                        q["waiting"],
                        q["in_flight"],
                        duration(q["waiting_since_ms"]),
                        q["processed"],
                        rate_text(q["jobs_per_s"]),
                        duration(q["age_mean_ms"]),
                        duration(q["age_max_ms"]),
                    )
                    for q in queues
                ),
            )
        )
    else:
        out.append("no queues yet")
    out.append("")
    if summary.get("rate_limits"):
        out += render_rate_limits(summary["rate_limits"])
    out.append(managers_table(summary["job_managers"]))
    out.append("")
    schedulers = summary["schedulers"]
    if schedulers:
        out.append(
            table(
                ("SCHEDULER", "LAST HEARTBEAT"),
                ((s["name"], ago_text(s["heartbeat_ago_s"])) for s in schedulers),
            )
        )
    else:
        out.append("no schedulers connected")
    t = summary["totals"]
    out += [
        "",
        f"total: {totals_text(t)}",
    ]
    if "jobs" in summary:
        out += ["", jobs_table(summary["jobs"])]
        total = summary.get("jobs_total", 0)
        if total > len(summary["jobs"]):
            out.append(f"(the {len(summary['jobs'])} oldest of {total} jobs handed out)")
    if "monitor" in summary:
        out += ["", "monitor:", admin_client.format_monitor(summary["monitor"])]
    return "\n".join(out) + "\n"


#: What a job's state is called in the table (a reference job manager says nothing
#: of its processes: its jobs are only "handed out").
STATE_TEXT = {"running": "running", "prefetched": "prefetched", "handed_out": "handed out"}


def jobs_table(jobs: Sequence[Mapping[str, Any]], *, by_shard: bool = False) -> str:
    """``--jobs``: every job handed out, oldest first: running ones with their worker
    process, prefetched ones waiting in their job manager."""
    if not jobs:
        return "no jobs running or prefetched"
    headers: tuple[str, ...] = ("MSGID", "JOB", "QUEUE", "JOB MANAGER", "STATE", "PID", "AGE")
    rows: list[tuple[object, ...]] = [
        (
            j.get("msgid"),
            j.get("job"),
            j.get("queue"),
            j.get("jobmanager"),
            STATE_TEXT.get(str(j.get("state")), j.get("state")),
            NONE if j.get("pid") is None else j.get("pid"),
            duration(None if j.get("age") is None else float(j["age"]) * 1000),
        )
        for j in jobs
    ]
    if by_shard:
        headers = ("SHARD", *headers)
        rows = [(j.get("shard"), *row) for j, row in zip(jobs, rows, strict=True)]
    return table(headers, rows)
