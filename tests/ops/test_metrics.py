"""Prometheus metrics: the event counters, families from admin answers, the HTTP endpoint."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from django_eventmq.core import metrics, status
from django_eventmq.errors import BrokerUnavailable, ConfigurationError
from tests.ops.test_status_render import SCHEDULERS, STATUS, WORKERS


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample at ``url`` as {(name, sorted labels): value}."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_events_count_by_queue_and_status_and_time_the_run():
    m = metrics.Metrics()
    m.job_received("email")
    m.job_dispatched("email")
    m.job_finished("email", "succeeded", 0.2)
    m.job_finished("email", "failed", 3.0)
    m.job_finished("email", "timed_out")
    m.job_retried("email")
    m.heartbeat_missed()
    get = m.registry.get_sample_value
    assert get("emq_jobs_received_total", {"queue": "email"}) == 1
    assert get("emq_jobs_dispatched_total", {"queue": "email"}) == 1
    assert get("emq_jobs_finished_total", {"queue": "email", "status": "succeeded"}) == 1
    assert get("emq_jobs_finished_total", {"queue": "email", "status": "failed"}) == 1
    assert get("emq_jobs_failed_total", {"queue": "email"}) == 2  # failed + timed out
    assert get("emq_jobs_retried_total", {"queue": "email"}) == 1
    assert get("emq_heartbeats_missed_total") == 1
    assert get("emq_job_duration_seconds_count", {"queue": "email"}) == 2
    assert get("emq_job_duration_seconds_bucket", {"queue": "email", "le": "0.25"}) == 1


def test_refresh_sets_gauges_from_status_and_forgets_gone_queues():
    m = metrics.Metrics()
    m.refresh(STATUS)
    get = m.registry.get_sample_value
    assert get("emq_queue_depth", {"queue": "email"}) == 3
    assert get("emq_jobs_in_flight", {"queue": "email"}) == 2
    assert get("emq_jobs_in_flight", {"queue": "default"}) == 0
    m.refresh({"waiting_messages_by_queue": {"default": 1}})
    assert get("emq_queue_depth", {"queue": "email"}) is None
    assert get("emq_queue_depth", {"queue": "default"}) == 1


def test_get_metrics_is_one_per_process():
    assert metrics.get_metrics() is metrics.get_metrics()


def _registry_of(snapshot: status.Snapshot) -> CollectorRegistry:
    registry = CollectorRegistry()

    class Fixed(metrics.RouterAdminCollector):
        def collect(self):  # type: ignore[no-untyped-def]
            yield from metrics.router_families(snapshot)

    registry.register(Fixed("unused"))
    return registry


def test_router_families_from_admin_answers():
    snapshot = status.Snapshot(
        admin_addr="a",
        taken_at=1.0,
        status=STATUS,
        workers=WORKERS,
        schedulers=SCHEDULERS,
        monitor={"store_bytes": 4096, "syncs": 7, "expired": 1, "rejected": 0, "duplicates": 2},
    )
    get = _registry_of(snapshot).get_sample_value
    assert get("emq_router_up") == 1
    assert get("emq_queue_depth", {"queue": "email"}) == 3
    assert get("emq_jobs_in_flight", {"queue": "email"}) == 2
    assert get("emq_queue_oldest_waiting_seconds", {"queue": "email"}) == 65.0
    assert get("emq_jobs_processed_total", {"queue": "default"}) == 5
    assert get("emq_jobs_requeued_total") == 2
    assert get("emq_jobs_lost_total") == 1
    assert get("emq_jobs_poisoned") == 1
    assert get("emq_job_managers_connected") == 1
    assert get("emq_job_manager_free_slots", {"jobmanager": "jm-1"}) == 4
    assert get("emq_schedulers_connected") == 1
    assert get("emq_journal_bytes") == 4096
    assert get("emq_journal_syncs_total") == 7
    assert get("emq_journal_duplicates_total") == 2


def test_an_unreachable_router_is_up_0_and_nothing_else():
    def ask(addr: str, command: str, timeout: float) -> dict[str, object]:
        raise BrokerUnavailable("no answer")

    registry = CollectorRegistry()
    registry.register(metrics.RouterAdminCollector("tcp://127.0.0.1:9", ask=ask))
    assert registry.get_sample_value("emq_router_up") == 0
    assert registry.get_sample_value("emq_queue_depth", {"queue": "email"}) is None


@pytest.mark.parametrize(
    ("addr", "listen"),
    [
        ("127.0.0.1:9187", ("127.0.0.1", 9187)),
        (":9187", ("127.0.0.1", 9187)),
        ("9187", ("127.0.0.1", 9187)),
        ("http://0.0.0.0:0/", ("0.0.0.0", 0)),
        ("[::1]:9187", ("::1", 9187)),
    ],
)
def test_listen_addresses(addr, listen):
    assert metrics.parse_listen(addr) == listen


@pytest.mark.parametrize("addr", ["localhost:http", "127.0.0.1:70000", "", "host:"])
def test_bad_listen_addresses_say_what_would_work(addr):
    with pytest.raises(ConfigurationError, match=r"is not HOST:PORT \(e\.g\. '127\.0\.0\.1:9187'"):
        metrics.parse_listen(addr)


def test_the_endpoint_serves_a_registry_over_http():
    m = metrics.Metrics()
    m.job_finished("email", "succeeded", 0.01)
    server = metrics.start_metrics_server("127.0.0.1:0", m.registry)
    try:
        assert server.port > 0
        samples = scrape(server.url)
        key = ("emq_jobs_finished_total", (("queue", "email"), ("status", "succeeded")))
        assert samples[key] == 1
    finally:
        server.close()


def test_a_taken_port_is_a_clear_error():
    server = metrics.start_metrics_server("127.0.0.1:0", CollectorRegistry())
    try:
        with pytest.raises(ConfigurationError, match=r"cannot serve metrics on '127\.0\.0\.1:"):
            metrics.start_metrics_server(f"127.0.0.1:{server.port}", CollectorRegistry())
    finally:
        server.close()
