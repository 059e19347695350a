"""Workflows end to end: a router, a job manager with Django workers and a client process
(real processes on loopback, one SQLite file): a chain passes results along, a group
collects them, a chord's callback gets the list, a failing member stops its chain (after
its retries) and shows as failed, a cancel stops the rest."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import wait_for
from tests.system.e2e.workflow_stack import WorkflowStack, db_env, lines

RUNNER = "django_eventmq.jobs.run_workflow_step"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkflowStack]:
    tmp = tmp_path_factory.mktemp("workflows")
    made = WorkflowStack(db_env(tmp), tmp / "journal.sqlite3")
    try:
        made.start_jobmanager(concurrency=3)
        yield made
    finally:
        made.stop()


def test_a_chain_passes_each_result_to_the_next(stack: WorkflowStack, tmp_path: Path) -> None:
    log = tmp_path / "ran"
    out = stack.client("run", "chain3", str(log), "-")
    assert out["result"] == 12  # double(double(add(1, 2)))
    assert lines(log) == ["add 1 2", "double 3", "double 6"]
    row = stack.workflow(out["id"])
    assert (row["status"], row["kind"], json.loads(row["result"])) == ("succeeded", "chain", 12)
    steps = stack.steps(out["id"])
    assert [(s["stage"], json.loads(s["value"]), s["completions"]) for s in steps] == [
        (0, 3, 1),
        (1, 6, 1),
        (2, 12, 1),
    ]
    # Each member has its results row (written in batches, so maybe a little later),
    # named for the member's job, not the runner.
    rows = wait_for(
        lambda: (
            (found := stack.result_rows(out["id"]))
            and all(r["status"] == "succeeded" for r in found.values())
            and len(found) == 3
            and found
        ),
        30,
        "the members' results rows",
    )
    assert sorted(r["job"].rsplit(".", 1)[1] for r in rows.values()) == ["add", "double", "double"]
    assert RUNNER not in {r["job"] for r in rows.values()}


def test_a_group_collects_every_result_in_order(stack: WorkflowStack, tmp_path: Path) -> None:
    log = tmp_path / "ran"
    out = stack.client("run", "group5", str(log), "-")
    assert out["result"] == [10, 11, 12, 13, 14]
    assert sorted(lines(log)) == [f"add {i} 10" for i in range(5)]
    assert stack.workflow(out["id"])["kind"] == "group"


def test_a_chords_callback_gets_the_list(stack: WorkflowStack, tmp_path: Path) -> None:
    log = tmp_path / "ran"
    out = stack.client("run", "chord", str(log), "-")
    assert out["result"] == 12  # total([0, 2, 4, 6])
    ran = Counter(lines(log))
    assert ran["total [0, 2, 4, 6]"] == 1  # the callback ran once, with the list in order
    assert sum(ran.values()) == 5


def test_a_failing_member_stops_the_chain_and_fails_the_workflow(
    stack: WorkflowStack, tmp_path: Path
) -> None:
    log = tmp_path / "ran"
    out = stack.client("run", "failing", str(log), "-")
    assert out["error"] == "JobError"
    assert "ValueError" in out["message"] and "boom at 3" in out["message"]
    # Its retry (retry_count=1) ran before the workflow failed; the last member never ran.
    assert lines(log) == ["add 1 2", "boom 3", "boom 3"]
    row = stack.workflow(out["id"])
    failed = f"wf-{out['id']}-1-0"
    assert (row["status"], row["failed_msgid"], row["exc_type"]) == ("failed", failed, "ValueError")
    rows = stack.result_rows(out["id"])  # the failed row is what failed the workflow
    assert (rows[failed]["status"], rows[failed]["attempts"]) == ("failed", 2)
    assert f"wf-{out['id']}-2-0" not in rows  # never sent
    # The admin shows it: failed, the failed member's row linked, the last one not sent.
    page = stack.client("admin", out["id"])
    assert page["status"] == 200
    html = page["html"]
    link = f'/admin/django_eventmq/jobresult/{rows[failed]["id"]}/change/">{failed}</a>'
    assert link in html and "not sent" in html and "ValueError" in html
    assert '<div class="readonly">failed</div>' in html


def test_a_members_retry_policy_holds_inside_a_workflow(
    stack: WorkflowStack, tmp_path: Path
) -> None:
    log = tmp_path / "ran"
    out = stack.client("run", "picky", str(log), "-")
    assert out["error"] == "JobError" and "picky at 3" in out["message"]
    # retry_count=2 but retry_on=KeyError: the ValueError is not retried.
    assert lines(log) == ["add 1 2", "picky 3"]
    failed = f"wf-{out['id']}-1-0"
    assert stack.workflow(out["id"])["failed_msgid"] == failed
    assert stack.result_rows(out["id"])[failed]["attempts"] == 1


def test_cancel_stops_the_running_member_and_the_rest_never_runs(
    stack: WorkflowStack, tmp_path: Path
) -> None:
    log, gate = tmp_path / "ran", tmp_path / "gate"
    workflow_id = stack.client("send", "gated_chain", str(log), str(gate))
    wait_for(lambda: "start b" in lines(log), 30, "the gated member to start")
    assert stack.client("cancel", workflow_id) == "cancelled"
    running = f"wf-{workflow_id}-1-0"
    wait_for(
        lambda: stack.result_rows(workflow_id).get(running, {}).get("status") == "cancelled",
        30,
        "the running member to be stopped",
    )
    gate.touch()  # were it still running, it would finish now
    out = stack.client("wait", workflow_id, "5")
    assert out["error"] == "WorkflowCancelled"
    assert stack.workflow(workflow_id)["status"] == "cancelled"
    assert lines(log) == ["add 1 2", "start b"]
    assert f"wf-{workflow_id}-2-0" not in stack.result_rows(workflow_id)
