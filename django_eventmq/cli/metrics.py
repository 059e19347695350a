"""Prometheus metrics: families built on each scrape, and the HTTP endpoint.

Nothing is counted here: the router (:class:`.book.Book`) and the job
manager (:class:`.lifecycle.Lifecycle`) keep plain counters
(:class:`.stats.Stats`) on their hot paths, and a scrape turns them into
metric families:

* :class:`RouterAdminCollector` asks a router's admin socket STATUS (whose
  extras carry the router's counters), ROUTER_SHOW_WORKERS,
  ROUTER_SHOW_SCHEDULERS and MONITOR on each scrape, so a router's numbers are
  served from a sidecar thread without touching its loop;
* :class:`JobManagerCollector` reads what a job manager object holds.

Both endpoints export the same job families (:func:`stats_families`):
``emq_jobs_received_total``, ``emq_jobs_dispatched_total``,
``emq_jobs_finished_total{status}``, ``emq_jobs_failed_total``,
``emq_jobs_retried_total``, ``emq_job_duration_seconds`` (a histogram),
``emq_heartbeats_missed_total``, ``emq_queue_depth`` and ``emq_jobs_in_flight``.

:func:`start_metrics_server` serves a registry at ``http://ADDR/metrics``.
Never imports Django.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from django_eventmq.cli import status
from django_eventmq.errors import ConfigurationError
from django_eventmq.runtime import admin_client

log = logging.getLogger("django_eventmq.metrics")


def _ints(mapping: Any) -> dict[str, float]:
    if not isinstance(mapping, Mapping):
        return {}
    return {str(k): v for k, v in mapping.items() if isinstance(v, int | float)}


def stats_families(data: Mapping[str, Any], queues: Iterable[str] = ()) -> list[Metric]:
    """The job families of a :meth:`.stats.Stats.as_dict`-shaped mapping.

    ``queues``: queues to show with 0s even before they counted anything.
    """
    names = set(queues)
    families: list[Metric] = []
    for key, name, doc in (
        ("received", "emq_jobs_received", "Jobs accepted."),
        ("dispatched", "emq_jobs_dispatched", "Jobs handed out (to a job manager, to a child)."),
        ("failed", "emq_jobs_failed", "Jobs that failed, timed out, were refused or died."),
        ("retried", "emq_jobs_retried", "Failed runs that will be retried."),
    ):
        counts = _ints(data.get(f"{key}_messages_by_queue"))
        family = CounterMetricFamily(name, doc, labels=["queue"])
        for queue in sorted(names | set(counts)):
            family.add_metric([queue], counts.get(queue, 0))
        families.append(family)
    finished = CounterMetricFamily(
        "emq_jobs_finished",
        "Jobs over, by outcome (ok, failed, timeout, ...).",
        labels=["queue", "status"],
    )
    by_queue = data.get("finished_messages_by_queue") or {}
    for queue in sorted(by_queue):
        for outcome, n in sorted(_ints(by_queue[queue]).items()):
            finished.add_metric([queue, outcome], n)
    families.append(finished)
    bounds = [float(b) for b in data.get("duration_buckets") or ()]
    duration = HistogramMetricFamily(
        "emq_job_duration_seconds",
        "How long jobs ran (job manager) or were out (router: hand-out to report).",
        labels=["queue"],
    )
    for queue, row in sorted((data.get("duration_seconds_by_queue") or {}).items()):
        per_bucket = [int(n) for n in row.get("counts", ())]
        if len(per_bucket) != len(bounds) + 1:
            continue  # not a shape we know
        buckets: list[tuple[str, float]] = []
        below = 0
        for bound, n in zip(bounds, per_bucket, strict=False):
            below += n
            buckets.append((repr(bound), below))  # Prometheus spells bounds as Python does
        buckets.append(("+Inf", below + per_bucket[-1]))
        duration.add_metric([queue], buckets, float(row.get("sum", 0.0)))
    families.append(duration)
    missed = CounterMetricFamily(
        "emq_heartbeats_missed", "Peers given up on after missing their heartbeats."
    )
    missed.add_metric([], data.get("heartbeats_missed", 0))
    families.append(missed)
    return families


# -- collectors ------------------------------------------------------------------


def _gauge(name: str, doc: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


def router_families(snap: status.Snapshot) -> list[Metric]:
    """The metric families of one admin snapshot (``emq_router_up`` 0 if unreachable)."""
    up = _gauge("emq_router_up", "1 if the router answered on its admin address.")
    up.add_metric([], 0 if snap.error else 1)
    if snap.error:
        return [up]
    s = snap.status
    group = status.group_summary(s)
    if group is not None and group.get("role") != "leader":
        return [up, *group_families(group)]  # a standby serves nothing else
    depth = _gauge("emq_queue_depth", "Jobs waiting in a queue.", ["queue"])
    inflight = _gauge("emq_jobs_in_flight", "Jobs sent to a job manager, not finished.", ["queue"])
    oldest = _gauge("emq_queue_oldest_waiting_seconds", "Age of the oldest waiting job.", ["queue"])
    processed = CounterMetricFamily(
        "emq_jobs_processed", "Jobs the router saw finish.", labels=["queue"]
    )
    # Every queue the router knows (waiting, in flight, processed or served), 0s included.
    rows = status.summarize(snap)["queues"]
    for row in rows:
        queue = row["queue"]
        depth.add_metric([queue], row["waiting"])
        inflight.add_metric([queue], row["in_flight"])
        processed.add_metric([queue], row["processed"])
        if row["waiting_since_ms"] is not None:
            oldest.add_metric([queue], row["waiting_since_ms"] / 1000)
    held = _gauge(
        "emq_queue_rate_limited",
        "Jobs held back by a rate limit now (docs/rate-limits.md).",
        ["queue"],
    )
    for queue, limit in sorted((s.get("rate_limits_by_queue") or {}).items()):
        held.add_metric([queue], limit.get("held_back", 0))
    requeued = CounterMetricFamily("emq_jobs_requeued", "Jobs given back to a queue.")
    requeued.add_metric([], s.get("requeued_messages", 0))
    poisoned = _gauge("emq_jobs_poisoned", "Jobs set aside after killing job managers.")
    poisoned.add_metric([], len(s.get("poisoned_messages") or []))
    workers = snap.workers.get("connected_workers") or {}
    managers = _gauge("emq_job_managers_connected", "Job managers connected.")
    managers.add_metric([], len(workers))
    slots = _gauge("emq_job_manager_free_slots", "Jobs a job manager can take.", ["jobmanager"])
    for name, info in sorted(workers.items()):
        slots.add_metric([name], info.get("available_slots", 0))
    schedulers = _gauge("emq_schedulers_connected", "Schedulers connected.")
    schedulers.add_metric([], len(snap.schedulers.get("connected_schedulers") or {}))
    families: list[Metric] = [
        up,
        depth,
        inflight,
        oldest,
        processed,
        requeued,
        held,
        poisoned,
        managers,
        slots,
        schedulers,
        *stats_families(s, [row["queue"] for row in rows]),
        *(group_families(group) if group is not None else ()),
    ]
    m = snap.monitor
    if m:
        journal = _gauge("emq_journal_bytes", "Size of the router's journal.")
        journal.add_metric([], m.get("store_bytes", 0))
        families.append(journal)
        writable = _gauge(
            "emq_journal_writable", "1 while the router's journal can be written, else 0."
        )
        writable.add_metric([], 0 if m.get("journal_failure") else 1)
        families.append(writable)
        for key, doc in (
            ("syncs", "Journal syncs to storage."),
            ("expired", "Job leases that expired."),
            ("jobs_expired", "Jobs not started before their expiry (never run)."),
            ("rejected", "Jobs rejected above the high-water mark."),
            ("duplicates", "Duplicate jobs dropped."),
            ("unique_refused", "Unique jobs refused: another job held their key."),
        ):
            family = CounterMetricFamily(f"emq_journal_{key}", doc)
            family.add_metric([], m.get(key, 0))
            families.append(family)
        families.extend(_client_families(m))
    return families


def group_families(group: Mapping[str, Any]) -> list[Metric]:
    """A router group member's families: role, epoch, leadership changes, failovers."""
    labels = [str(group.get("group") or "")]
    leader = _gauge("emq_router_leader", "1 if this router leads its group, else 0.", ["group"])
    leader.add_metric(labels, 1 if group.get("role") == "leader" else 0)
    epoch = _gauge("emq_router_group_epoch", "The group's leadership epoch.", ["group"])
    epoch.add_metric(labels, group.get("epoch") or 0)
    changes = CounterMetricFamily(
        "emq_router_leadership_changes",
        "Times this router took or lost its group's leadership.",
        labels=["group"],
    )
    changes.add_metric(labels, group.get("leadership_changes") or 0)
    failovers = CounterMetricFamily(
        "emq_router_group_failovers",
        "Times leadership of the group changed hands (from the group's lease).",
        labels=["group"],
    )
    failovers.add_metric(labels, group.get("failovers") or 0)
    families: list[Metric] = [leader, epoch, changes, failovers]
    seconds = group.get("last_failover_seconds")
    if isinstance(seconds, int | float):
        last = _gauge(
            "emq_router_last_failover_seconds",
            "Seconds the group had no leader at its last failover (old leader's last "
            "renewal to the takeover).",
            ["group"],
        )
        last.add_metric(labels, seconds)
        families.append(last)
    return families


def _client_families(m: Mapping[str, Any]) -> list[Metric]:
    """MONITOR's bounds on clients: the outbox (OUTBOX_BUDGET), held jobs, refused CANCELs."""
    outbox = _gauge("emq_router_outbox_bytes", "Bytes queued for clients that read slowly.")
    outbox.add_metric([], m.get("outbox_bytes", 0))
    held = _gauge("emq_queue_held_jobs", "Jobs held unacknowledged: queue at its mark.", ["queue"])
    for queue, n in sorted((m.get("held") or {}).items()):
        held.add_metric([queue], n)
    families: list[Metric] = [outbox, held]
    for key, doc in (
        ("clients_cut_off", "Clients cut off for not reading (OUTBOX_BUDGET)."),
        ("cancels_refused", "CANCELs refused: another key sent the job (CANCEL_POLICY)."),
    ):
        family = CounterMetricFamily(f"emq_router_{key}", doc)
        family.add_metric([], m.get(key, 0))
        families.append(family)
    return families


class RouterAdminCollector(Collector):
    """Asks a router's admin socket on each scrape (in the scraping thread, its own socket)."""

    def __init__(
        self,
        admin_addr: str | Callable[[], str],
        *,
        timeout: float = 1.0,
        monitor: bool = True,
        ask: status.Ask = admin_client.ask,
    ) -> None:
        # A callable: the router binds port 0 and knows its address only later.
        self._addr = admin_addr if callable(admin_addr) else (lambda: admin_addr)
        self._timeout = timeout
        self._monitor = monitor
        self._ask = ask

    def collect(self) -> Iterator[Metric]:
        snap = status.fetch(
            self._addr(), timeout=self._timeout, monitor=self._monitor, ask=self._ask
        )
        yield from router_families(snap)


class JobManagerCollector(Collector):
    """A running job manager: its job counters (:func:`stats_families`), jobs waiting for
    a child (``emq_queue_depth``) and given to one (``emq_jobs_in_flight``), slots,
    children, connected.

    Reads the object's attributes from the scraping thread: plain reads and
    copies of dicts, never a call into its loop.
    """

    def __init__(self, manager: Any) -> None:
        self._manager = manager

    def collect(self) -> Iterator[Metric]:
        m = self._manager
        jobs = _copy_values(m.jobs)
        inflight = _gauge(
            "emq_jobmanager_jobs", "Jobs this job manager holds (running or waiting).", ["queue"]
        )
        counts: dict[str, int] = {}
        for job in jobs:
            counts[job.queue] = counts.get(job.queue, 0) + 1
        for _weight, queue in m.settings.queues:
            counts.setdefault(queue, 0)
        depth = _gauge("emq_queue_depth", "Jobs held, waiting for a worker process.", ["queue"])
        running = _gauge(
            "emq_jobs_in_flight", "Jobs given to a worker process, not finished.", ["queue"]
        )
        given: dict[str, int] = {}
        for job in jobs:
            if job.child is not None:
                given[job.queue] = given.get(job.queue, 0) + 1
        for queue, n in sorted(counts.items()):
            inflight.add_metric([queue], n)
            depth.add_metric([queue], n - given.get(queue, 0))
            running.add_metric([queue], given.get(queue, 0))
        data = m.lifecycle.stats.as_dict()
        data["heartbeats_missed"] = m.link.heartbeats_missed  # the router went silent
        slots = _gauge("emq_jobmanager_slots", "Jobs this job manager takes at once.")
        slots.add_metric([], m.slots)
        children = _gauge("emq_jobmanager_children", "Worker processes alive.")
        children.add_metric([], len(_copy_values(m.pool.children)))
        connected = _gauge("emq_jobmanager_connected", "1 while connected to the router.")
        connected.add_metric([], 1 if m.link.connected else 0)
        yield from (inflight, depth, running, slots, children, connected)
        yield from stats_families(data, counts)


def _copy_values(mapping: Mapping[Any, Any]) -> list[Any]:
    # The owner's thread may change the dict while we copy: copy again then.
    for _ in range(5):
        try:
            return list(mapping.values())
        except RuntimeError:
            continue
    return []


# -- the endpoint ----------------------------------------------------------------


@dataclass
class MetricsServer:
    """A running ``/metrics`` endpoint (a daemon thread); :meth:`close` stops it."""

    server: WSGIServer
    thread: threading.Thread
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def parse_listen(addr: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT``, ``PORT`` or ``http://HOST:PORT`` as (host, port); host defaults
    to 127.0.0.1 and port 0 picks a free one."""
    text = addr.removeprefix("http://").rstrip("/")
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "", text
    host = host.strip("[]") or "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ConfigurationError(
            f"metrics address {addr!r} is not HOST:PORT (e.g. '127.0.0.1:9187', ':9187')"
        )
    return host, port


def start_metrics_server(addr: str, registry: CollectorRegistry) -> MetricsServer:
    """Serve ``registry`` at ``http://ADDR/metrics`` from a daemon thread."""
    host, port = parse_listen(addr)
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot serve metrics on {addr!r} (--metrics): {exc.strerror or exc}; "
            "stop what listens there, or choose another port with --metrics"
        ) from None
    running = MetricsServer(server, thread, host, int(server.server_port))
    log.info("metrics at %s", running.url)
    return running


def router_registry(
    admin_addr: str | Callable[[], str], *, timeout: float = 1.0
) -> CollectorRegistry:
    """A registry that reads a router's admin socket on each scrape (a sidecar's)."""
    registry = CollectorRegistry()
    registry.register(RouterAdminCollector(admin_addr, timeout=timeout))
    return registry


def jobmanager_registry(manager: Any) -> CollectorRegistry:
    """A registry that reads ``manager`` (a :class:`.manager.JobManager`) on each scrape."""
    registry = CollectorRegistry()
    registry.register(JobManagerCollector(manager))
    return registry
