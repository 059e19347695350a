"""Prometheus metrics: the event counters, families from admin answers, the HTTP endpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import urllib.request

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from django_eventmq.cli import metrics, status
from django_eventmq.errors import BrokerUnavailable, ConfigurationError
from django_eventmq.runtime import stats
from tests.cli.test_status_render import SCHEDULERS, STATUS, WORKERS
from tests.support import ROOT, clean_environ


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample at ``url`` as {(name, sorted labels): value}."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_stats_count_by_queue_and_status_and_time_the_run():
    st = stats.Stats()
    st.received["email"] += 1
    st.dispatched["email"] += 1
    st.finish("email", "ok", 0.2)
    st.finish("email", "failed", 3.0)
    st.finish("email", "timeout", 0.25)  # on a bound: counted in that bound's bucket
    st.finish("email", "cancelled")  # not timed
    st.retried["email"] += 1
    st.heartbeats_missed += 1
    data = st.as_dict()
    assert json.loads(json.dumps(data)) == data  # the router sends it as JSON
    assert data["finished_messages_by_queue"] == {
        "email": {"ok": 1, "failed": 1, "timeout": 1, "cancelled": 1}
    }
    assert data["failed_messages_by_queue"] == {"email": 2}  # failed + timed out
    row = data["duration_seconds_by_queue"]["email"]
    assert sum(row["counts"]) == 3
    assert row["sum"] == pytest.approx(3.45)
    bounds = data["duration_buckets"]
    assert row["counts"][bounds.index(0.25)] == 2  # 0.2 and 0.25
    assert row["counts"][bounds.index(5)] == 1  # 3.0


def _families_registry(data: dict[str, object], queues: tuple[str, ...] = ()) -> CollectorRegistry:
    registry = CollectorRegistry()

    class Fixed(Collector):
        def collect(self):  # type: ignore[no-untyped-def]
            yield from metrics.stats_families(data, queues)

    registry.register(Fixed())
    return registry


def test_stats_families_are_prometheus_counters_and_a_histogram():
    st = stats.Stats()
    st.received["email"] += 2
    st.finish("email", "ok", 0.2)
    st.finish("email", "failed", 3.0)
    st.retried["email"] += 1
    st.heartbeats_missed = 2
    get = _families_registry(st.as_dict(), ("email", "default")).get_sample_value
    assert get("emq_jobs_received_total", {"queue": "email"}) == 2
    assert get("emq_jobs_received_total", {"queue": "default"}) == 0  # known queues show 0s
    assert get("emq_jobs_dispatched_total", {"queue": "email"}) == 0
    assert get("emq_jobs_finished_total", {"queue": "email", "status": "ok"}) == 1
    assert get("emq_jobs_failed_total", {"queue": "email"}) == 1
    assert get("emq_jobs_retried_total", {"queue": "email"}) == 1
    assert get("emq_heartbeats_missed_total") == 2
    assert get("emq_job_duration_seconds_count", {"queue": "email"}) == 2
    assert get("emq_job_duration_seconds_sum", {"queue": "email"}) == pytest.approx(3.2)
    assert get("emq_job_duration_seconds_bucket", {"queue": "email", "le": "0.1"}) == 0
    assert get("emq_job_duration_seconds_bucket", {"queue": "email", "le": "0.25"}) == 1
    assert get("emq_job_duration_seconds_bucket", {"queue": "email", "le": "5.0"}) == 2
    assert get("emq_job_duration_seconds_bucket", {"queue": "email", "le": "+Inf"}) == 2


def test_stats_families_skip_a_histogram_of_an_unknown_shape():
    data = {"duration_buckets": [1.0], "duration_seconds_by_queue": {"q": {"counts": [1]}}}
    get = _families_registry(data).get_sample_value
    assert get("emq_job_duration_seconds_count", {"queue": "q"}) is None
    assert get("emq_heartbeats_missed_total") == 0


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
        monitor={
            "store_bytes": 4096,
            "syncs": 7,
            "expired": 1,
            "rejected": 0,
            "duplicates": 2,
            "unique_refused": 3,
        },
    )
    get = _registry_of(snapshot).get_sample_value
    assert get("emq_router_up") == 1
    assert get("emq_queue_depth", {"queue": "email"}) == 3
    assert get("emq_jobs_in_flight", {"queue": "email"}) == 2
    assert get("emq_queue_oldest_waiting_seconds", {"queue": "email"}) == 65.0
    assert get("emq_jobs_processed_total", {"queue": "default"}) == 5
    assert get("emq_jobs_requeued_total") == 2
    assert get("emq_jobs_lost_total") is None  # no such family: the router gives no job up
    assert get("emq_jobs_poisoned") == 1
    assert get("emq_job_managers_connected") == 1
    assert get("emq_job_manager_free_slots", {"jobmanager": "jm-1"}) == 4
    assert get("emq_schedulers_connected") == 1
    assert get("emq_journal_bytes") == 4096
    assert get("emq_journal_syncs_total") == 7
    assert get("emq_journal_duplicates_total") == 2
    assert get("emq_journal_unique_refused_total") == 3
    # The router's own counters, from its STATUS extras.
    assert get("emq_jobs_received_total", {"queue": "email"}) == 46
    assert get("emq_jobs_received_total", {"queue": "reports"}) == 0
    assert get("emq_jobs_dispatched_total", {"queue": "email"}) == 44
    assert get("emq_jobs_finished_total", {"queue": "email", "status": "failed"}) == 2
    assert get("emq_jobs_failed_total", {"queue": "email"}) == 2
    assert get("emq_jobs_retried_total", {"queue": "email"}) == 1
    assert get("emq_heartbeats_missed_total") == 1
    assert get("emq_job_duration_seconds_bucket", {"queue": "email", "le": "1.0"}) == 39
    assert get("emq_job_duration_seconds_count", {"queue": "email"}) == 40


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
    st = stats.Stats()
    st.finish("email", "ok", 0.01)
    server = metrics.start_metrics_server("127.0.0.1:0", _families_registry(st.as_dict()))
    try:
        assert server.port > 0
        samples = scrape(server.url)
        key = ("emq_jobs_finished_total", (("queue", "email"), ("status", "ok")))
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


#: A prometheus_client that does not import, as when the metrics extra is not installed.
NO_PROMETHEUS = (
    "raise ModuleNotFoundError(\"No module named 'prometheus_client'\", name='prometheus_client')\n"
)
ANY = "tcp://127.0.0.1:*"


@pytest.mark.parametrize(
    "command",
    [
        ("emq_router", "--no-journal", "--frontend", ANY, "--backend", ANY, "--admin", ANY),
        ("emq_jobmanager", "--broker", "tcp://127.0.0.1:9"),
    ],
    ids=["emq_router", "emq_jobmanager"],
)
def test_metrics_without_prometheus_client_says_which_extra_to_install(command, tmp_path):
    (tmp_path / "prometheus_client").mkdir()
    (tmp_path / "prometheus_client" / "__init__.py").write_text(NO_PROMETHEUS)
    done = subprocess.run(
        [sys.executable, "manage.py", *command, "--metrics", "127.0.0.1:0"],
        cwd=ROOT,
        env={
            **clean_environ(),
            "PYTHONPATH": os.pathsep.join((str(tmp_path), str(ROOT))),
            "DJANGO_SETTINGS_MODULE": "example_project.settings",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    # One line, before anything started.
    assert done.stderr == (
        "CommandError: --metrics needs prometheus-client, which does not import here "
        "(No module named 'prometheus_client'): pip install 'django-eventmq[metrics]'\n"
    )
    assert done.stdout == ""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(
        d.startswith("prometheus-client") for d in extras["optional-dependencies"]["metrics"]
    )


def test_router_families_of_the_bounds_on_clients():
    """MONITOR's outbox, held jobs and refused CANCELs (docs/durability.md, security.md)."""
    monitor = {
        "outbox_bytes": 5000,
        "clients_cut_off": 3,
        "held": {"stuck": 30},
        "cancels_refused": 2,
    }
    snapshot = status.Snapshot(
        admin_addr="a", taken_at=1.0, status=STATUS, workers={}, schedulers={}, monitor=monitor
    )
    get = _registry_of(snapshot).get_sample_value
    assert get("emq_router_outbox_bytes") == 5000
    assert get("emq_router_clients_cut_off_total") == 3
    assert get("emq_queue_held_jobs", {"queue": "stuck"}) == 30
    assert get("emq_router_cancels_refused_total") == 2
