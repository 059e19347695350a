"""The REFERENCE client (eventmq 0.3.13) -> OUR router -> OUR job manager."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import Proc, wait_for

from .conftest import (
    INTEROP,
    OUR_DEADLINE,
    PLAIN_JOB,
    RECORD_JOB,
    Router,
    run_reference_client,
    wait_records,
    without_pid,
)

pytestmark = INTEROP


@pytest.fixture
def router(our_stack: tuple[Router, Proc]) -> Router:
    return our_stack[0]


def test_reference_job_runs_with_its_arguments(router: Router, records_file: Path) -> None:
    args = [1, "two", {"three": [3]}, None]
    msgid, frames = run_reference_client(
        router.frontend, RECORD_JOB, args, {"out": str(records_file), "k": "v"}
    )

    records = wait_records(records_file)
    assert without_pid(records) == [{"args": args, "kwargs": {"k": "v"}}]
    # Our router answers the reference client's REQUEST with an ACK of its msgid.
    acks = [f for f in frames if f[2:3] == ["ACK"]]
    assert [f[4] for f in acks] == [msgid], frames


def test_reference_job_with_all_headers_on_email_queue(router: Router, records_file: Path) -> None:
    """guarantee, retry-count, timeout and reply-requested as the reference writes them."""
    admin = router.admin()
    before = admin.processed("email")
    msgid, frames = run_reference_client(
        router.frontend,
        RECORD_JOB,
        ["mail", 2],
        {"out": str(records_file)},
        "--queue",
        "email",
        "--reply",
        "--guarantee",
        "--retry-count",
        "3",
        "--timeout",
        "30",
        "--listen",
        "10",
        "--until-result",
    )

    assert without_pid(wait_records(records_file)) == [{"args": ["mail", 2], "kwargs": {}}]
    wait_for(lambda: admin.processed("email") > before, 5, "STATUS counting the email job")
    # The job's REPLY reached the reference client's socket, in the reference's
    # shape: ['', 'eMQP/1.0', 'REPLY', NEWID, '{"value": ...}', ORIGINAL_MSGID].
    replies = [f for f in frames if f[2:3] == ["REPLY"] and len(f) >= 6]
    assert replies, f"no job REPLY reached the reference client; it got {frames}"
    reply = replies[-1]
    assert reply[:2] == ["", "eMQP/1.0"]
    assert reply[5] == msgid
    assert json.loads(reply[4]) == {"value": {"args": ["mail", 2], "kwargs": {}}}


def test_reference_job_in_an_allowed_module(router: Router, records_file: Path) -> None:
    """A plain function (no @job) runs because its module is in --allow-module."""
    run_reference_client(router.frontend, PLAIN_JOB, ["plain"], {"out": str(records_file)})
    assert without_pid(wait_records(records_file)) == [{"args": ["plain"], "kwargs": {}}]


def test_reference_job_not_allowed_is_refused_and_next_job_runs(
    our_stack: tuple[Router, Proc], records_file: Path, tmp_path: Path
) -> None:
    """A callable outside @job and the allowed modules never runs; the next job does."""
    router, jobmanager = our_stack
    canary = tmp_path / "canary"
    canary.write_text("still here")
    run_reference_client(router.frontend, "os.remove", [str(canary)], {})
    wait_for(
        lambda: "os.remove" in jobmanager.output(), OUR_DEADLINE, "the refusal of os.remove logged"
    )
    run_reference_client(router.frontend, RECORD_JOB, ["after"], {"out": str(records_file)})

    assert without_pid(wait_records(records_file)) == [{"args": ["after"], "kwargs": {}}]
    assert canary.read_text() == "still here"
    assert router.alive()
