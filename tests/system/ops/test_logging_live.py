"""Logging: quiet at INFO (no line per job); at DEBUG one msgid is followed from the client
(Django) through the router to the job manager, in the text and as record attributes."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from django_eventmq.cli import admin_client
from django_eventmq.client.connection import Client
from django_eventmq.runtime.logs import JobFields, job_debug
from tests.support import Proc, python_module, wait_for
from tests.system.ops.conftest import JOBS, Site, start_router

JOBS_PER_RUN = 30


def processed(site: Site, queue: str = "default") -> int:
    answer = admin_client.ask(site.admin, "STATUS", 5.0)
    return int(answer["processed_messages_by_queue"].get(queue, 0))


def start_site(level: str) -> Site:
    router, (frontend, backend, admin) = start_router("--log-level", level)
    jobmanager = Proc(
        python_module(
            "jobmanager", "--broker", backend, "--queues", "default:10", "--concurrency", "2",
            "--job-module", JOBS, "--log-level", level,
        )
    )  # fmt: skip
    jobmanager.wait_output(r"jobmanager connected")
    return Site(frontend, backend, admin, router, jobmanager, Client(frontend))


def stop_site(site: Site) -> None:
    site.client.channel.close()
    site.jobmanager.stop()
    site.router.stop()


@pytest.fixture
def info_site() -> Iterator[Site]:
    site = start_site("INFO")
    try:
        yield site
    finally:
        stop_site(site)


@pytest.fixture
def debug_site() -> Iterator[Site]:
    site = start_site("DEBUG")
    try:
        yield site
    finally:
        stop_site(site)


def test_info_logs_no_line_per_job(info_site):
    site = info_site
    msgids = [site.send("default", "noop", n) for n in range(JOBS_PER_RUN)]
    wait_for(lambda: processed(site) >= JOBS_PER_RUN, 60, f"{JOBS_PER_RUN} jobs processed")
    # Let the job manager write whatever it would write about the last jobs.
    site.jobmanager.stop()
    outputs = {"router": site.router.output(), "jobmanager": site.jobmanager.output()}
    assert "router ready" in outputs["router"]  # the capture works at INFO
    assert "jobmanager connected" in outputs["jobmanager"]
    for name, text in outputs.items():
        assert not [m for m in msgids if m in text], f"{name} logged a job at INFO:\n{text}"
        assert len(text.splitlines()) < 10, f"{name} is not quiet at INFO:\n{text}"


def test_debug_follows_one_msgid_from_django_through_router_and_job_manager(
    debug_site, eventmq_settings, caplog
):
    from tests.system.ops.jobs import noop

    site = debug_site
    eventmq_settings(BROKER_ADDR=site.frontend)
    with caplog.at_level(logging.DEBUG, "django_eventmq.client"):
        msgid = str(noop.delay(7))
    (sent,) = [r for r in caplog.records if getattr(r, "msgid", None) == msgid]
    assert (sent.name, sent.queue, sent.job) == (  # type: ignore[attr-defined]
        "django_eventmq.client",
        "default",
        "tests.system.ops.jobs.noop",
    )
    assert f"msgid={msgid} queue=default job=tests.system.ops.jobs.noop" in sent.getMessage()

    wait_for(lambda: processed(site) >= 1, 60, "the job processed")
    site.jobmanager.wait_output(
        rf"job ok msgid={msgid} queue=default job=tests\.system\.ops\.jobs\.noop"
    )
    router_lines = [line for line in site.router.output().splitlines() if msgid in line]
    jm_lines = [line for line in site.jobmanager.output().splitlines() if msgid in line]
    assert any(
        "django_eventmq.router" in line and f"msgid={msgid} queue=default" in line
        for line in router_lines
    ), router_lines
    assert any("job handed to" in line for line in router_lines), router_lines
    assert any("job DONE ok from" in line for line in router_lines), router_lines
    assert any(
        "django_eventmq.jobmanager" in line and "job received, attempt 1" in line
        for line in jm_lines
    ), jm_lines


def test_the_fields_are_record_attributes_a_format_can_name():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(JobFields())
    handler.setFormatter(logging.Formatter("%(name)s [%(msgid)s|%(queue)s|%(job)s] %(message)s"))
    logger = logging.getLogger("django_eventmq.test_fields")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        job_debug(logger, "ran in %.1fs", "m-1", "email", 1.5, job="shop.jobs.send")
        logger.info("not about a job")
        job_debug(logger, "left out", "m-2", "email")
        logger.setLevel(logging.INFO)
        job_debug(logger, "not shown at INFO", "m-3", "email")
    finally:
        logger.removeHandler(handler)
    assert stream.getvalue().splitlines() == [
        "django_eventmq.test_fields [m-1|email|shop.jobs.send] "
        "job ran in 1.5s msgid=m-1 queue=email job=shop.jobs.send",
        "django_eventmq.test_fields [||] not about a job",
        "django_eventmq.test_fields [m-2|email|] job left out msgid=m-2 queue=email",
    ]
