"""Prometheus metrics: one registry per process, an HTTP endpoint, and collectors.

Two ways to fill a registry:

* :class:`Metrics` holds counters, gauges and a histogram that a process
  updates as things happen (``get_metrics().job_finished(queue, status, s)``);
  :meth:`Metrics.refresh` sets the depth and in-flight gauges from a
  STATUS-like dict.
* :class:`RouterAdminCollector` asks a router's admin socket STATUS (and
  ROUTER_SHOW_WORKERS, MONITOR) on each scrape, so a router's numbers are
  served from a sidecar thread without touching its loop;
  :class:`JobManagerCollector` reads what a job manager object holds.

:func:`start_metrics_server` serves a registry at ``http://ADDR/metrics``.
Never imports Django.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ..errors import ConfigurationError
from . import router_cli, status

log = logging.getLogger("django_eventmq.metrics")

#: Job run times (seconds): from quick jobs to the five-minute kind.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
#: Statuses that count as failures too (``emq_jobs_failed_total``).
FAILED_STATUSES = frozenset({"failed", "timed_out", "error", "exception"})


class Metrics:
    """The event metrics of one process, in their own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.received = Counter(
            "emq_jobs_received", "Jobs accepted from clients.", ["queue"], registry=r
        )
        self.dispatched = Counter(
            "emq_jobs_dispatched", "Jobs sent to a job manager.", ["queue"], registry=r
        )
        self.finished = Counter(
            "emq_jobs_finished", "Jobs that finished, by status.", ["queue", "status"], registry=r
        )
        self.failed = Counter(
            "emq_jobs_failed", "Jobs that failed or timed out.", ["queue"], registry=r
        )
        self.retried = Counter(
            "emq_jobs_retried", "Job runs retried or requeued.", ["queue"], registry=r
        )
        self.queue_depth = Gauge(
            "emq_queue_depth", "Jobs waiting in a queue.", ["queue"], registry=r
        )
        self.in_flight = Gauge(
            "emq_jobs_in_flight", "Jobs sent to a job manager, not finished.", ["queue"], registry=r
        )
        self.duration = Histogram(
            "emq_job_duration_seconds",
            "How long jobs ran.",
            ["queue"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.heartbeats_missed = Counter(
            "emq_heartbeats_missed", "Peers dropped for missing heartbeats.", registry=r
        )
        self._gauge_queues: set[str] = set()

    # -- events: one call each, at the place it happens ----------------------------
    def job_received(self, queue: str) -> None:
        self.received.labels(queue).inc()

    def job_dispatched(self, queue: str) -> None:
        self.dispatched.labels(queue).inc()

    def job_finished(self, queue: str, status: str, seconds: float | None = None) -> None:
        """A job is over: counted by status, as a failure if it is one, and timed."""
        self.finished.labels(queue, status).inc()
        if status in FAILED_STATUSES:
            self.failed.labels(queue).inc()
        if seconds is not None and seconds >= 0:
            self.duration.labels(queue).observe(seconds)

    def job_retried(self, queue: str) -> None:
        self.retried.labels(queue).inc()

    def heartbeat_missed(self) -> None:
        self.heartbeats_missed.inc()

    # -- gauges from a STATUS answer -----------------------------------------------
    def refresh(self, answer: Mapping[str, Any]) -> None:
        """Set queue depth and in flight from a STATUS-like dict; forget queues it lacks."""
        waiting = answer.get("waiting_messages_by_queue") or {}
        inflight = answer.get("inflight_messages_by_queue") or {}
        queues = set(waiting) | set(inflight)
        for queue in queues:
            self.queue_depth.labels(queue).set(waiting.get(queue, 0))
            self.in_flight.labels(queue).set(inflight.get(queue, 0))
        for gone in self._gauge_queues - queues:
            self.queue_depth.remove(gone)
            self.in_flight.remove(gone)
        self._gauge_queues = queues


_process: tuple[int, Metrics] | None = None
_lock = threading.Lock()


def get_metrics() -> Metrics:
    """This process's :class:`Metrics` (a forked child gets its own, empty)."""
    global _process
    with _lock:
        if _process is None or _process[0] != os.getpid():
            _process = (os.getpid(), Metrics())
        return _process[1]


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
    depth = _gauge("emq_queue_depth", "Jobs waiting in a queue.", ["queue"])
    inflight = _gauge("emq_jobs_in_flight", "Jobs sent to a job manager, not finished.", ["queue"])
    oldest = _gauge("emq_queue_oldest_waiting_seconds", "Age of the oldest waiting job.", ["queue"])
    processed = CounterMetricFamily(
        "emq_jobs_processed", "Jobs the router saw finish.", labels=["queue"]
    )
    # Every queue the router knows (waiting, in flight, processed or served), 0s included.
    for row in status.summarize(snap)["queues"]:
        queue = row["queue"]
        depth.add_metric([queue], row["waiting"])
        inflight.add_metric([queue], row["in_flight"])
        processed.add_metric([queue], row["processed"])
        if row["waiting_since_ms"] is not None:
            oldest.add_metric([queue], row["waiting_since_ms"] / 1000)
    requeued = CounterMetricFamily("emq_jobs_requeued", "Jobs given back to a queue.")
    requeued.add_metric([], s.get("requeued_messages", 0))
    lost = CounterMetricFamily("emq_jobs_lost", "Jobs lost with a job manager.")
    lost.add_metric([], s.get("lost_messages", 0))
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
        lost,
        poisoned,
        managers,
        slots,
        schedulers,
    ]
    m = snap.monitor
    if m:
        journal = _gauge("emq_journal_bytes", "Size of the router's journal.")
        journal.add_metric([], m.get("store_bytes", 0))
        families.append(journal)
        for key, doc in (
            ("syncs", "Journal syncs to storage."),
            ("expired", "Job leases that expired."),
            ("rejected", "Jobs rejected above the high-water mark."),
            ("duplicates", "Duplicate jobs dropped."),
        ):
            family = CounterMetricFamily(f"emq_journal_{key}", doc)
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
        ask: status.Ask = router_cli.ask,
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
    """What a running job manager holds: jobs by queue, slots, children, connected.

    Reads the object's attributes from the scraping thread: plain reads and a
    copy of one dict, never a call into its loop.
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
        for queue, n in sorted(counts.items()):
            inflight.add_metric([queue], n)
        slots = _gauge("emq_jobmanager_slots", "Jobs this job manager takes at once.")
        slots.add_metric([], m.slots)
        children = _gauge("emq_jobmanager_children", "Worker processes alive.")
        children.add_metric([], len(_copy_values(m.pool.children)))
        connected = _gauge("emq_jobmanager_connected", "1 while connected to the router.")
        connected.add_metric([], 1 if m.link.connected else 0)
        yield from (inflight, slots, children, connected)


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


def start_metrics_server(addr: str, registry: CollectorRegistry | None = None) -> MetricsServer:
    """Serve ``registry`` (default: this process's :class:`Metrics`) at ``http://ADDR/metrics``."""
    host, port = parse_listen(addr)
    try:
        server, thread = start_http_server(
            port, addr=host, registry=registry or get_metrics().registry
        )
    except OSError as exc:
        raise ConfigurationError(f"cannot serve metrics on {addr!r}: {exc}") from None
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
    """This process's :class:`Metrics` plus what ``manager`` holds, in one registry."""
    registry = get_metrics().registry
    registry.register(JobManagerCollector(manager))
    return registry
