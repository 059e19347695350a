"""A job manager with no router says so: once, then at a slow rate (not at every retry)."""

from __future__ import annotations

import logging
import re

import pytest

from django_eventmq.runtime.waitlog import RouterWait
from tests.support import Proc, python_module, tcp_addr, wait_for

LOG = logging.getLogger("tests.waitlog")


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOG.name]


def test_waiting_is_said_once_then_every_interval(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOG.name)
    wait = RouterWait(LOG, "jobmanager", "tcp://router:1", every=60)
    for now in (10, 11, 40, 69):  # retries with back-off: only the first is said
        wait.no_answer(now)
    assert said(caplog) == [
        "jobmanager waiting for the router at tcp://router:1: no answer yet (is it running, "
        "and is this its address?); retrying"
    ]
    wait.no_answer(70)
    wait.no_answer(100)
    wait.no_answer(131)
    assert said(caplog)[1:] == [
        "jobmanager still waiting for the router at tcp://router:1 (60s so far)",
        "jobmanager still waiting for the router at tcp://router:1 (121s so far)",
    ]


def test_after_connecting_a_new_wait_is_said_at_once_and_a_loss_waits_the_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOG.name)
    wait = RouterWait(LOG, "scheduler", "tcp://router:1", every=60)
    wait.no_answer(0)
    wait.connected()
    wait.no_answer(5)
    assert len(said(caplog)) == 2 and "waiting for the router" in said(caplog)[1]
    wait.connected()
    wait.lost(100)  # the caller logged the loss itself
    wait.no_answer(101)
    wait.no_answer(159)
    assert len(said(caplog)) == 2
    wait.no_answer(161)
    assert said(caplog)[2] == (
        "scheduler still waiting for the router at tcp://router:1 (61s so far)"
    )


def test_a_jobmanager_with_no_router_logs_that_it_waits_for_it_once() -> None:
    addr = tcp_addr()  # nothing listens there
    proc = Proc(
        python_module("jobmanager", "--broker", addr, "--concurrency", "1", "--log-level", "DEBUG"),
        env={"EMQ_HEARTBEAT_INTERVAL": "0.1", "EMQ_HEARTBEAT_TIMEOUT": "0.3"},
    )
    try:
        proc.wait_output(re.escape(f"jobmanager waiting for the router at {addr}: no answer yet"))
        # Three more attempts later, it has not said it again (the next line is a minute away).
        wait_for(
            lambda: proc.output().count(f"no answer from the router at {addr}") >= 4,
            20,
            "four unanswered attempts",
        )
        assert proc.output().count("waiting for the router") == 1
    finally:
        proc.stop()
