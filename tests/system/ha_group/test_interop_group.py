"""The REFERENCE eventmq 0.3.13 peers on a router group's leader (one address each).

The reference client and job manager know nothing of groups: they are given the
leader's frontend and backend only. A reference client's guaranteed job, sent to
a leader whose journal is PostgreSQL, is ACKed and runs on the reference job
manager, and on our job manager too.

The reference is driven from subprocesses only, by the interop tests' helpers
(``tests/system/interop/conftest.py``), never imported here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import Proc
from tests.system.chaos.support import descendants
from tests.system.ha_group.conftest import running_group
from tests.system.ha_group.support import Group
from tests.system.interop.conftest import (
    OUR_DEADLINE,
    RECORD_JOB,
    REFERENCE_DEADLINE,
    REFERENCE_MISSING,
    run_reference_client,
    start_our_jobmanager,
    start_reference_jobmanager,
    wait_records,
    without_pid,
)

pytestmark = [
    pytest.mark.interop,
    pytest.mark.postgres,
    pytest.mark.skipif(REFERENCE_MISSING is not None, reason=REFERENCE_MISSING or ""),
]

#: The reference job manager heartbeats every 3 s: the group's routers must not
#: take it for gone after the 2 s the other group tests use (EMQ_HEARTBEAT_TIMEOUT).
PATIENT = "15"


@pytest.fixture
def group(pg_dsn: str, pg_group: str, tmp_path: Path) -> Iterator[Group]:
    with running_group(pg_dsn, pg_group, tmp_path, EMQ_HEARTBEAT_TIMEOUT=PATIENT) as made:
        yield made


def send_and_check(group: Group, jobmanager: Proc, out: Path, deadline: float) -> None:
    """A reference client's guaranteed job to the leader's frontend: ACKed, and run
    once by a worker process of ``jobmanager`` with its arguments."""
    args = [3, "group", {"journal": "postgresql"}]
    msgid, frames = run_reference_client(
        group.a.frontend,
        RECORD_JOB,
        args,
        {"out": str(out), "via": "leader"},
        "--guarantee",
        "--listen",
        "2",
    )
    acks = [f for f in frames if f[2:3] == ["ACK"]]
    assert [f[4] for f in acks] == [msgid], frames  # ACKed once the journal has it
    records = wait_records(out, timeout=deadline)
    assert without_pid(records) == [{"args": args, "kwargs": {"via": "leader"}}]
    workers = {pid for pid, _started in descendants(jobmanager.pid)}
    assert records[0]["pid"] in workers, (records, workers)  # this job manager ran it
    assert group.a.status()["role"] == "leader"
    assert jobmanager.popen.poll() is None


def test_reference_client_to_reference_jobmanager_through_the_leader(
    group: Group, tmp_path: Path
) -> None:
    jobmanager = start_reference_jobmanager(group.a.backend, tmp_path)
    group.procs.append(jobmanager)
    send_and_check(group, jobmanager, tmp_path / "ref.jsonl", REFERENCE_DEADLINE)


def test_reference_client_to_our_jobmanager_through_the_leader(
    group: Group, tmp_path: Path
) -> None:
    jobmanager = start_our_jobmanager(group.a.backend, group.env)
    group.procs.append(jobmanager)
    send_and_check(group, jobmanager, tmp_path / "ours.jsonl", OUR_DEADLINE)
