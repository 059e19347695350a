"""``manage.py emq_router --metrics`` / ``emq_jobmanager --metrics`` scraped over HTTP."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from tests.ops.conftest import ANY, JOBS, Site
from tests.ops.test_metrics import scrape
from tests.support import ROOT, Proc, wait_for

ENV = {"DJANGO_SETTINGS_MODULE": "tests.settings"}


def manage(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "manage.py"), *args]


@pytest.fixture(scope="module")
def metered() -> Iterator[tuple[Site, str, str]]:
    """Router and job manager, each serving metrics on a free port; their URLs."""
    from django_eventmq.core.client import Client

    procs: list[Proc] = []
    try:
        router = Proc(
            manage(
                "emq_router",
                "--frontend", ANY, "--backend", ANY, "--admin", ANY,
                "--no-journal", "--metrics", "127.0.0.1:0",
            ),
            env=ENV,
        )  # fmt: skip
        procs.append(router)
        ready = router.wait_output(r"router ready: frontend=(\S+) backend=(\S+) admin=(\S+)")
        router_url = router.wait_output(r"metrics at (http://\S+)").group(1)
        frontend, backend, admin = ready.groups()
        jobmanager = Proc(
            manage(
                "emq_jobmanager",
                "--broker", backend, "--queues", "email:30,default:10",
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
    samples = scrape(jm_url)
    assert samples[("emq_jobmanager_connected", ())] == 1
    assert samples[("emq_jobmanager_children", ())] == 2
    assert samples[("emq_jobmanager_slots", ())] > 0
    flag = tmp_path / "release"
    site.send("default", "hold", str(flag))
    held = ("emq_jobmanager_jobs", (("queue", "default"),))
    try:
        wait_for(lambda: scrape(jm_url).get(held) == 1, 30, "the held job at the job manager")
        inflight = ("emq_jobs_in_flight", (("queue", "default"),))
        wait_for(lambda: scrape(router_url).get(inflight) == 1, 30, "in flight at the router")
    finally:
        flag.touch()
    wait_for(lambda: scrape(jm_url).get(held) == 0, 30, "the held job finished")
