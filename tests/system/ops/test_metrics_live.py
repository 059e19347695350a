"""``manage.py emq_router --metrics`` / ``emq_jobmanager --metrics`` scraped over HTTP."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator

import pytest

from tests.cli.test_metrics import scrape
from tests.support import ROOT, Proc, wait_for
from tests.system.ops.conftest import ANY, JOBS, Site

ENV = {"DJANGO_SETTINGS_MODULE": "tests.settings"}
#: The router retries a failed job after this many seconds (the test waits for it).
RETRY_ENV = {**ENV, "EMQ_RETRY_BACKOFF_BASE": "0.2"}
Sample = tuple[str, tuple[tuple[str, str], ...]]


def manage(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "manage.py"), *args]


@pytest.fixture(scope="module")
def metered() -> Iterator[tuple[Site, str, str]]:
    """Router and job manager, each serving metrics on a free port; their URLs."""
    from django_eventmq.client.connection import Client

    procs: list[Proc] = []
    try:
        router = Proc(
            manage(
                "emq_router",
                "--frontend", ANY, "--backend", ANY, "--admin", ANY,
                "--no-journal", "--metrics", "127.0.0.1:0",
            ),
            env=RETRY_ENV,
        )  # fmt: skip
        procs.append(router)
        ready = router.wait_output(r"router ready: frontend=(\S+) backend=(\S+) admin=(\S+)")
        router_url = router.wait_output(r"metrics at (http://\S+)").group(1)
        frontend, backend, admin = ready.groups()
        jobmanager = Proc(
            manage(
                "emq_jobmanager",
                "--broker", backend, "--queues", "email:30,default:10,counted:5",
                "--concurrency", "2", "--job-module", JOBS, "--metrics", "127.0.0.1:0",
            ),
            env=ENV,
        )  # fmt: skip
        procs.append(jobmanager)
        jm_url = jobmanager.wait_output(r"metrics at (http://\S+)").group(1)
        jobmanager.wait_output(r"jobmanager connected")
        client = Client(frontend)
        try:
            yield Site(frontend, backend, admin, router, jobmanager, client), router_url, jm_url
        finally:
            client.channel.close()
    finally:
        for proc in reversed(procs):
            proc.stop()


def test_the_router_endpoint_counts_processed_jobs_and_sees_the_job_manager(metered):
    site, router_url, _ = metered
    for n in range(4):
        site.send("email", "noop", n)

    def processed() -> float:
        return scrape(router_url).get(("emq_jobs_processed_total", (("queue", "email"),)), 0)

    wait_for(lambda: processed() >= 4, 30, "four email jobs counted at /metrics")
    samples = scrape(router_url)
    assert samples[("emq_router_up", ())] == 1
    assert samples[("emq_job_managers_connected", ())] == 1
    assert samples[("emq_queue_depth", (("queue", "email"),))] == 0
    assert samples[("emq_journal_bytes", ())] > 0
    (slots,) = [v for (name, _), v in samples.items() if name == "emq_job_manager_free_slots"]
    assert slots > 0


def test_the_job_manager_endpoint_shows_jobs_it_holds(metered, tmp_path):
    site, router_url, jm_url = metered
    # Children start one at a time while none is up: wait for the second.
    children = ("emq_jobmanager_children", ())
    wait_for(lambda: scrape(jm_url).get(children) == 2, 60, "both worker processes up")
    samples = scrape(jm_url)
    assert samples[("emq_jobmanager_connected", ())] == 1
    assert samples[("emq_jobmanager_slots", ())] > 0
    flag = tmp_path / "release"
    site.send("default", "hold", str(flag))
    held = ("emq_jobmanager_jobs", (("queue", "default"),))
    try:
        wait_for(lambda: scrape(jm_url).get(held) == 1, 30, "the held job at the job manager")
        inflight = ("emq_jobs_in_flight", (("queue", "default"),))
        wait_for(lambda: scrape(router_url).get(inflight) == 1, 30, "in flight at the router")
        wait_for(lambda: scrape(jm_url).get(inflight) == 1, 30, "in a worker process")
        assert scrape(jm_url)[("emq_queue_depth", (("queue", "default"),))] == 0
    finally:
        flag.touch()
    wait_for(lambda: scrape(jm_url).get(held) == 0, 30, "the held job finished")
    assert scrape(jm_url).get(("emq_jobs_in_flight", (("queue", "default"),))) == 0


def _counted(name: str, **labels: str) -> Sample:
    return (name, tuple(sorted({"queue": "counted", **labels}.items())))


def test_both_endpoints_count_each_job_family_with_the_right_values(metered, tmp_path):
    """Three jobs succeed, one fails, one fails once and succeeds when retried."""
    site, router_url, jm_url = metered
    for n in range(3):
        site.send("counted", "noop", n)
    site.send("counted", "boom", "counted")
    site.send("counted", "flaky", str(tmp_path / "flaky"), headers="retry-count:1")

    def finished(url: str) -> float:
        return sum(
            value
            for (name, labels), value in scrape(url).items()
            if name == "emq_jobs_finished_total" and ("queue", "counted") in labels
        )

    wait_for(lambda: finished(router_url) == 5, 60, "five jobs finished at the router")
    # The job manager counts an outcome before it reports it: it has them all too.
    for url, received in ((router_url, 5), (jm_url, 6)):  # the retry reaches the job manager anew
        samples = scrape(url)
        assert samples[_counted("emq_jobs_received_total")] == received, url
        assert samples[_counted("emq_jobs_dispatched_total")] == 6, url
        assert samples[_counted("emq_jobs_finished_total", status="ok")] == 4, url
        assert samples[_counted("emq_jobs_finished_total", status="failed")] == 1, url
        assert samples[_counted("emq_jobs_failed_total")] == 1, url
        assert samples[_counted("emq_jobs_retried_total")] == 1, url
        assert samples[_counted("emq_job_duration_seconds_count")] == 5, url
        assert samples[_counted("emq_job_duration_seconds_bucket", le="+Inf")] == 5, url
        assert samples[_counted("emq_job_duration_seconds_sum")] >= 0, url
        assert samples[_counted("emq_queue_depth")] == 0, url
        assert samples[_counted("emq_jobs_in_flight")] == 0, url
        assert samples[("emq_heartbeats_missed_total", ())] == 0, url


@pytest.fixture
def short_heartbeats() -> Iterator[tuple[Proc, str, str]]:
    """Router and job manager that give a peer up after 2 s of silence; the router and URLs."""
    env = {**ENV, "EMQ_HEARTBEAT_INTERVAL": "0.5", "EMQ_HEARTBEAT_TIMEOUT": "2"}
    procs: list[Proc] = []
    try:
        router = Proc(
            manage(
                "emq_router", "--frontend", ANY, "--backend", ANY, "--admin", ANY,
                "--no-journal", "--metrics", "127.0.0.1:0",
            ),
            env=env,
        )  # fmt: skip
        procs.append(router)
        backend = router.wait_output(r"router ready: frontend=\S+ backend=(\S+)").group(1)
        router_url = router.wait_output(r"metrics at (http://\S+)").group(1)
        jobmanager = Proc(
            manage(
                "emq_jobmanager", "--broker", backend, "--concurrency", "1",
                "--job-module", JOBS, "--metrics", "127.0.0.1:0",
            ),
            env=env,
        )  # fmt: skip
        procs.append(jobmanager)
        jm_url = jobmanager.wait_output(r"metrics at (http://\S+)").group(1)
        jobmanager.wait_output(r"jobmanager connected")
        yield router, router_url, jm_url
    finally:
        for proc in reversed(procs):
            if proc.popen.poll() is None:
                proc.signal(signal.SIGCONT)
            proc.stop()


def test_heartbeats_missed_are_counted_on_both_sides(short_heartbeats):
    """A router frozen past the timeout: the job manager gives it up, then the router the
    job manager's old connection."""
    router, router_url, jm_url = short_heartbeats
    missed = ("emq_heartbeats_missed_total", ())
    assert scrape(router_url)[missed] == 0
    assert scrape(jm_url)[missed] == 0
    router.signal(signal.SIGSTOP)
    try:
        wait_for(lambda: scrape(jm_url)[missed] >= 1, 30, "the job manager to miss the router")
    finally:
        router.signal(signal.SIGCONT)
    wait_for(lambda: scrape(router_url)[missed] >= 1, 30, "the router to drop the old connection")
    router.wait_output(r"worker \S+ dropped \(silent for more than 2\.0s\)")
