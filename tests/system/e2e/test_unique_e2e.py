"""Unique jobs end to end: a router, a job manager and clients as real processes.

Two client processes send the same unique job at once: one is accepted, the
other raises JobNotUnique naming the first's msgid, and the job runs once;
after it finished and its unique_for passed it is accepted again. A key
callable makes jobs with other arguments the same job. The router rebuilds
the key table from its journal after a crash. A reference eventmq 0.3.13
client, whose jobs carry no key, is never refused.
"""

from __future__ import annotations

import json
import re
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from django_eventmq.client import connection
from django_eventmq.errors import JobNotUnique
from tests.support import Proc, python_module, run_checked, wait_for
from tests.system.e2e.stack import RouterStack, serving
from tests.system.e2e.unique_jobs import charge, nightly, rebuild, runs
from tests.system.interop.conftest import (
    REFERENCE_DEADLINE,
    REFERENCE_MISSING,
    run_reference_client,
    start_reference_jobmanager,
)

JOB_MODULE = "tests.system.e2e.unique_jobs"

#: A client process: waits for the go file, sends ``nightly(out)``, prints what happened.
SENDER = """
import json, sys
from pathlib import Path
from django_eventmq.errors import JobNotUnique
from tests.support import wait_for
from tests.system.e2e.unique_jobs import nightly
go, out = Path(sys.argv[1]), sys.argv[2]
print("ready", flush=True)
wait_for(go.exists, 60, "the go file", poll=0.002)  # both go within ~2 ms of each other
try:
    print(json.dumps({"sent": str(nightly.delay(out))}), flush=True)
except JobNotUnique as exc:
    print(json.dumps({"refused": exc.holder, "msgid": exc.msgid}), flush=True)
"""


@pytest.fixture
def stack(tmp_path: Path, eventmq_settings: Any) -> Iterator[RouterStack]:
    """A router with no job manager yet (the test starts one)."""
    with serving(RouterStack(tmp_path, JOB_MODULE), eventmq_settings) as s:
        yield s


def test_two_processes_send_the_same_unique_job_at_once_and_it_runs_once(
    stack: RouterStack, tmp_path: Path
) -> None:
    out, go = tmp_path / "runs", tmp_path / "go"
    env = {"EMQ_BROKER_ADDR": stack.frontend}
    senders = [Proc([sys.executable, "-c", SENDER, str(go), str(out)], env=env) for _ in "ab"]
    stack.procs.extend(senders)
    for sender in senders:
        sender.wait_output(r"ready")
    go.touch()
    said = [json.loads(s.wait_output(r"\{.*\}").group(0)) for s in senders]
    answered = time.time()
    (sent,) = [line["sent"] for line in said if "sent" in line]
    (refused,) = [line for line in said if "refused" in line]
    assert refused["refused"] == sent and refused["msgid"] != sent
    stack.start_jobmanager()
    wait_for(lambda: runs(out) == ["nightly"], 30, what="the accepted job to run")
    # The router has its DONE, and its unique_for (1 s from acceptance, before
    # `answered`) has passed: the key is free.
    wait_for(lambda: time.time() >= answered + 1, 5, what="unique_for to pass")
    wait_for(lambda: stack.monitor()["unique_keys"] == 0, 10, what="the key to be freed")
    again = nightly.delay(str(out))
    assert again.wait(timeout=30) == "ran"
    assert runs(out) == ["nightly", "nightly"]  # the refused one never ran
    monitor = stack.monitor()
    assert monitor["unique_refused"] == 1 and monitor["per_queue"]["default"]["unique_refused"] == 1
    shown = run_checked(python_module("status", "--admin", stack.admin, "--monitor"))
    assert re.search(r"^queue default: .*unique_refused=1", shown, re.M), shown


def test_a_unique_key_callable_makes_other_arguments_the_same_job(
    stack: RouterStack, tmp_path: Path
) -> None:
    out = str(tmp_path / "runs")
    first = charge.delay(1, 10, out)
    with pytest.raises(JobNotUnique) as refused:
        charge.delay(1, 20, out)  # the same account: the same job
    assert refused.value.holder == first
    charge.delay(2, 10, out)  # another account
    stack.start_jobmanager()
    wait_for(lambda: len(runs(tmp_path / "runs")) == 2, 30, what="both accepted jobs to run")
    assert sorted(runs(tmp_path / "runs")) == ["charge 1 10", "charge 2 10"]


def test_a_router_restarted_after_a_crash_still_refuses_a_held_key(
    stack: RouterStack, tmp_path: Path
) -> None:
    out = tmp_path / "runs"
    held = rebuild.delay(str(out))  # stored (the ACK came) and waiting: no job manager
    stack.router.signal(signal.SIGKILL)
    stack.router.popen.wait(10)
    stack.start_router()
    connection.close_clients()  # a fresh socket for the new router
    with pytest.raises(JobNotUnique) as refused:
        rebuild.delay(str(out))
    assert refused.value.holder == held
    assert stack.monitor()["unique_keys"] == 1
    stack.start_jobmanager()
    wait_for(lambda: runs(out) == ["rebuild"], 30, what="the held job to run")
    # unique_for=0: the key is free once the router has the job's end.
    wait_for(lambda: stack.monitor()["unique_keys"] == 0, 10, what="the key to be freed")
    rebuild.delay(str(out))
    wait_for(lambda: runs(out) == ["rebuild", "rebuild"], 30, what="the job sent again to run")


@pytest.mark.interop
@pytest.mark.skipif(REFERENCE_MISSING is not None, reason=REFERENCE_MISSING or "")
def test_a_reference_client_sending_the_same_job_twice_is_never_refused(
    stack: RouterStack, tmp_path: Path
) -> None:
    out = str(tmp_path / "runs")
    stack.start_jobmanager()
    nightly.delay(out)  # a unique job of ours next to it
    for _ in range(2):
        msgid, frames = run_reference_client(
            stack.frontend, f"{JOB_MODULE}.plain", [out, 1], {}, "--guarantee"
        )
        assert [f[4] for f in frames if f[2:3] == ["ACK"]] == [msgid], frames
    wait_for(
        lambda: sorted(runs(tmp_path / "runs")) == ["nightly", "plain 1", "plain 1"],
        30,
        what="all three jobs to run",
    )
    monitor = stack.monitor()
    assert monitor["unique_refused"] == 0 and monitor["rejected"] == 0


@pytest.mark.interop
@pytest.mark.skipif(REFERENCE_MISSING is not None, reason=REFERENCE_MISSING or "")
def test_a_reference_job_manager_runs_a_unique_job_and_its_end_frees_the_key(
    stack: RouterStack, tmp_path: Path
) -> None:
    out = tmp_path / "runs"
    first = nightly.delay(str(out))
    with pytest.raises(JobNotUnique) as refused:
        nightly.delay(str(out))
    assert refused.value.holder == first
    stack.procs.append(start_reference_jobmanager(stack.backend, tmp_path))
    wait_for(lambda: runs(out) == ["nightly"], REFERENCE_DEADLINE, what="the reference to run it")
    # It reports no DONE: the router counts its next READY as the job's end.
    wait_for(lambda: stack.monitor()["unique_keys"] == 0, REFERENCE_DEADLINE, what="the key freed")
    nightly.delay(str(out))
    wait_for(lambda: len(runs(out)) == 2, REFERENCE_DEADLINE, what="the job sent again to run")
