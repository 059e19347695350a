"""``emq_status`` over several routers: router groups (members ',' apart) and shards
(groups ';' apart).

:func:`admin_groups` reads an admin address list (``"a,b;c"``); :func:`fetch_groups`
asks every member at once; :func:`summarize_groups` makes the router table (one row
per member: :func:`router_row`), each shard's leader's summary and the totals across
shards; :func:`render_groups` draws them. One router's fetch, summary and tables are
:mod:`.status`, which this builds on (and whose command calls this for a list). Never
imports Django.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django_eventmq.cli import status
from django_eventmq.runtime import admin_client


def admin_groups(value: str, setting: str) -> tuple[tuple[str, ...], ...] | None:
    """The shards and members ``value`` names (each address connectable), or None when it is
    one address, read as always. A bad list is a :class:`.ConfigurationError` naming ``setting``."""
    if not admin_client.is_admin_list(value):
        return None
    groups = admin_client.parse_admin_groups(value, setting)
    return tuple(tuple(status.connectable(addr) for addr in members) for members in groups)


# -- summary: the router table, each shard's leader, totals across shards ---------


def fetch_groups(
    groups: Sequence[Sequence[str]],
    *,
    timeout: float = 2.0,
    monitor: bool = False,
    jobs: bool = False,
    ask: status.Ask = admin_client.ask,
) -> list[list[status.Snapshot]]:
    """:func:`.status.fetch` of every member of every group at once: an unreachable member costs one
    ``timeout``, not one per member."""
    addresses = [addr for members in groups for addr in members]
    with ThreadPoolExecutor(max_workers=len(addresses)) as pool:
        snaps = iter(
            pool.map(
                lambda addr: status.fetch(
                    addr, timeout=timeout, monitor=monitor, jobs=jobs, ask=ask
                ),
                addresses,
            )
        )
        return [[next(snaps) for _ in members] for members in groups]


def router_row(shard: int, snap: status.Snapshot) -> dict[str, Any]:
    """One member of a shard: its role (``leader``, ``standby`` or ``unreachable``) and the
    lease it reports. A router outside a group serves its shard alone: ``leader``."""
    if snap.error:
        row = {"shard": shard, "address": snap.admin_addr, "role": "unreachable"}
        return {**row, "error": snap.error, **dict.fromkeys(ROUTER_ROW_KEYS)}
    group = status.group_summary(snap.status) or {}
    return {
        "shard": shard,
        "address": snap.admin_addr,
        "role": str(group.get("role") or "leader"),
        "error": "",
        "group": group.get("group"),
        "member": group.get("member"),
        "epoch": group.get("epoch"),
        "leader": group.get("leader"),
        "since": group.get("leader_since"),
        "failovers": group.get("failovers"),
        "last_failover": group.get("last_failover"),
        "last_failover_seconds": group.get("last_failover_seconds"),
    }


#: What a row of the router table says besides shard, address, role and error.
ROUTER_ROW_KEYS = (
    "group",
    "member",
    "epoch",
    "leader",
    "since",
    "failovers",
    "last_failover",
    "last_failover_seconds",
)


def _shard_leader(rows: Sequence[Mapping[str, Any]]) -> int | None:
    """The index of the member that leads (the highest epoch if two say so), or None."""
    leaders = [i for i, row in enumerate(rows) if row["role"] == "leader"]
    if not leaders:
        return None
    return max(leaders, key=lambda i: rows[i]["epoch"] or 0)


def _sum_optional(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _max_optional(values: Iterable[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _combined_queues(summaries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per queue, the leaders' rows added up (oldest wait and age: the largest)."""
    by_queue: dict[str, list[Mapping[str, Any]]] = {}
    for summary in summaries:
        for row in summary["queues"]:
            by_queue.setdefault(row["queue"], []).append(row)
    combined = []
    for name, rows in sorted(by_queue.items()):
        in_flight = sum(r["in_flight"] for r in rows)
        weighted = [
            (r["age_mean_ms"], r["in_flight"]) for r in rows if r["age_mean_ms"] is not None
        ]
        combined.append(
            {
                "queue": name,
                "waiting": sum(r["waiting"] for r in rows),
                "in_flight": in_flight,
                "waiting_since_ms": _max_optional(r["waiting_since_ms"] for r in rows),
                "processed": sum(r["processed"] for r in rows),
                "jobs_per_s": _sum_optional(r["jobs_per_s"] for r in rows),
                "age_mean_ms": (
                    sum(age * n for age, n in weighted) / in_flight
                    if weighted and in_flight
                    else None
                ),
                "age_max_ms": _max_optional(r["age_max_ms"] for r in rows),
                **{key: sum(r[key] for r in rows) for key in COUNTER_KEYS},
            }
        )
    return combined


#: The per-queue job counters of the router (a summary's queue rows).
COUNTER_KEYS = ("received", "dispatched", "failed", "retried")


def _combined_totals(summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    totals: dict[str, Any] = {}
    for key in (
        "waiting",
        "in_flight",
        "processed",
        "requeued",
        "failed",
        "retried",
        "heartbeats_missed",
        "poisoned",
        "buffered_schedule_messages",
    ):
        totals[key] = sum(int(s["totals"].get(key) or 0) for s in summaries)
    totals["jobs_per_s"] = _sum_optional(s["totals"]["jobs_per_s"] for s in summaries)
    return totals


def summarize_groups(
    groups: Sequence[Sequence[status.Snapshot]],
    previous: Mapping[str, status.Snapshot] | None = None,
) -> dict[str, Any]:
    """Every router of every shard, and each shard's leader's summary, as plain data.

    ``routers``: one row per member (:func:`router_row`); ``shards``: per shard
    its members, its leader's address and :func:`.status.summarize` (None when no
    member leads, with ``error`` saying why). ``queues``, ``job_managers``,
    ``schedulers``, ``totals`` and ``unserved_queues`` add the leaders up, so
    the summary also has the shape of one router's. ``previous``: the last
    snapshots by address, for throughput. ``reachable``: every shard has a
    leader that answered.
    """
    previous = previous or {}
    routers: list[dict[str, Any]] = []
    shards: list[dict[str, Any]] = []
    for number, snaps in enumerate(groups, 1):
        rows = [router_row(number, snap) for snap in snaps]
        routers += rows
        index = _shard_leader(rows)
        shard: dict[str, Any] = {
            "shard": number,
            "group": next((r["group"] for r in rows if r["group"]), None),
            "members": [snap.admin_addr for snap in snaps],
            "leader": None,
            "error": "",
            "summary": None,
        }
        if index is None:
            answered = any(not snap.error for snap in snaps)
            shard["error"] = (
                f"shard {number}: no member leads (standby only)"
                if answered
                else f"shard {number}: no member answered"
            )
        else:
            leader = snaps[index]
            shard["leader"] = leader.admin_addr
            shard["summary"] = status.summarize(leader, previous.get(leader.admin_addr))
        shards.append(shard)
    led = [(s["shard"], s["summary"]) for s in shards if s["summary"] is not None]
    summaries = [summary for _, summary in led]
    unserved: dict[str, int] = {}
    for summary in summaries:
        for queue, count in summary["unserved_queues"].items():
            unserved[queue] = unserved.get(queue, 0) + count
    failures = [f"shard {n}: {s['journal_failure']}" for n, s in led if s["journal_failure"]]
    errors = [s["error"] for s in shards if s["error"]]
    combined: dict[str, Any] = {}
    if any("jobs" in summary for summary in summaries):
        combined["jobs"] = [{**j, "shard": n} for n, s in led for j in s.get("jobs", [])]
    return combined | {
        "router": ";".join(",".join(s["members"]) for s in shards),
        "reachable": not errors,
        "error": "; ".join(errors),
        "journal_failure": "; ".join(failures) or None,
        "unserved_queues": unserved,
        "routers": routers,
        "shards": shards,
        "queues": _combined_queues(summaries),
        "job_managers": [{**m, "shard": n} for n, s in led for m in s["job_managers"]],
        "schedulers": [{**c, "shard": n} for n, s in led for c in s["schedulers"]],
        "totals": _combined_totals(summaries),
    }


# -- text ------------------------------------------------------------------------


def _seconds(value: Any) -> str:
    return status.duration(value * 1000) if isinstance(value, int | float) else status.NONE


def _shown(value: Any) -> object:
    return status.NONE if value is None else value


def render_groups(summary: Mapping[str, Any], *, title: str = "") -> str:
    """:func:`summarize_groups` as text: the routers, each shard's queues, totals across."""
    out = [title or f"routers {summary['router']}", ""]
    routers = summary["routers"]
    out.append(
        status.table(
            (
                "SHARD",
                "GROUP",
                "ADDRESS",
                "ROLE",
                "EPOCH",
                "LEADER SINCE",
                "FAILOVERS",
                "LAST FAILOVER",
                "WITHOUT LEADER",
            ),
            (
                (
                    r["shard"],
                    _shown(r["group"]),
                    r["address"],
                    r["role"],
                    _shown(r["epoch"]),
                    status.when_text(r["since"]),
                    _shown(r["failovers"]),
                    status.when_text(r["last_failover"]),
                    _seconds(r["last_failover_seconds"]),
                )
                for r in routers
            ),
            left=4,
        )
    )
    out += [f"{r['address']}: {r['error']}" for r in routers if r["error"]]
    out.append("")
    warnings = [s["error"] for s in summary["shards"] if s["error"]]
    if summary.get("journal_failure"):
        warnings.append(f"JOURNAL CANNOT BE WRITTEN: {summary['journal_failure']}")
    for shard in summary["shards"]:
        unserved = (shard["summary"] or {}).get("unserved_queues") or {}
        if unserved:
            warnings.append(status.unserved_warning(unserved, f"shard {shard['shard']}: "))
    if warnings:
        out += [*warnings, ""]
    rows = [
        (s["shard"], q)
        for s in summary["shards"]
        if s["summary"] is not None
        for q in s["summary"]["queues"]
    ]
    if len(summary["shards"]) > 1:
        rows += [("all", q) for q in summary["queues"]]
    if rows:
        out.append(
            status.table(
                ("SHARD", "QUEUE", "WAITING", "IN FLIGHT", "WAITING SINCE", "PROCESSED", "JOBS/S"),
                (
                    (
                        shard,
                        q["queue"],
                        q["waiting"],
                        q["in_flight"],
                        status.duration(q["waiting_since_ms"]),
                        q["processed"],
                        status.rate_text(q["jobs_per_s"]),
                    )
                    for shard, q in rows
                ),
                left=2,
            )
        )
    else:
        out.append("no queues yet")
    out.append("")
    out.append(status.managers_table(summary["job_managers"], by_shard=True))
    if "jobs" in summary:
        out += ["", status.jobs_table(summary["jobs"], by_shard=True)]
    if summary["schedulers"]:
        out += [
            "",
            status.table(
                ("SCHEDULER", "SHARD", "LAST HEARTBEAT"),
                (
                    (c["name"], c["shard"], status.ago_text(c["heartbeat_ago_s"]))
                    for c in summary["schedulers"]
                ),
            ),
        ]
    t = summary["totals"]
    led = sum(1 for s in summary["shards"] if s["summary"] is not None)
    out += [
        "",
        f"total across {led} of {len(summary['shards'])} shard(s): {status.totals_text(t)}",
    ]
    for shard in summary["shards"]:
        monitor = (shard["summary"] or {}).get("monitor")
        if monitor is not None:
            out += [
                "",
                f"monitor of shard {shard['shard']} ({shard['leader']}):",
                admin_client.format_monitor(monitor),
            ]
    return "\n".join(out) + "\n"
