"""Workflows through job managers SIGKILLed in the middle (real processes, one SQLite file).

A member waits on a gate file the test opens. The job manager running it is
killed while it waits; a new job manager takes the member (the router hands it
out again once the dead one's heartbeats stop) and the workflow completes.
The jobs' own logs count the runs: a member killed half way ran to completion
once; the members after it ran once. When only the job manager's process is
killed, its worker runs on, finishes the member and sends the next stage; the
member's second run (redelivered) sends it again under the same msgid, which
the router refuses: the next member still runs once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import wait_for
from tests.system.e2e.workflow_stack import WorkflowStack, db_env, lines


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return db_env(tmp_path_factory.mktemp("workflows-kill"))


@pytest.fixture
def stack(env: dict[str, str], tmp_path: Path) -> Iterator[WorkflowStack]:
    made = WorkflowStack(env, tmp_path / "journal.sqlite3")
    try:
        yield made
    finally:
        made.stop()


def _killed_while_gated(
    stack: WorkflowStack,
    tmp_path: Path,
    scenario: str,
    tag: str,
    *,
    children_too: bool,
    settled: tuple[str, ...] = (),
) -> tuple[str, Counter[str], Path]:
    """Run ``scenario``; kill its job manager while member ``tag`` waits (and the members
    at the places ``settled`` have been reported done); finish on a new job manager."""
    log, gate = tmp_path / "ran", tmp_path / "gate"
    # One worker per member, none queued behind the gated one.
    first = stack.start_jobmanager(concurrency=3, prefetch=0)
    workflow_id = stack.client("send", scenario, str(log), str(gate))
    wait_for(lambda: f"start {tag}" in lines(log), 30, f"member {tag} to start")
    # A member's results row is written after its job manager sent DONE: killed later,
    # it is not handed out again (killed sooner, it would run again: at least once).
    wanted = {f"wf-{workflow_id}-{place}" for place in settled}
    wait_for(
        lambda: all(
            stack.result_rows(workflow_id).get(msgid, {}).get("status") == "succeeded"
            for msgid in wanted
        ),
        30,
        f"members {sorted(wanted)} reported done",
    )
    stack.kill_jobmanager(first, children_too=children_too)
    gate.touch()
    stack.start_jobmanager(concurrency=3, prefetch=0)
    out = stack.client("wait", workflow_id, "60")
    assert "result" in out, f"{out}\n{stack.logs()}"
    return workflow_id, Counter(lines(log)), log


def test_a_chain_completes_after_its_job_manager_and_workers_are_killed(
    stack: WorkflowStack, tmp_path: Path
) -> None:
    workflow_id, ran, log = _killed_while_gated(
        stack, tmp_path, "gated_chain", "b", children_too=True, settled=("0-0",)
    )
    assert stack.client("wait", workflow_id)["result"] == 6  # double(gated(add(1, 2)))
    # The killed member started twice and completed once; the others ran once.
    assert ran == Counter({"add 1 2": 1, "start b": 2, "done b": 1, "double 3": 1}), lines(log)
    assert [s["completions"] for s in stack.steps(workflow_id)] == [1, 1, 1]
    wait_for(
        lambda: (
            stack.result_rows(workflow_id).get(f"wf-{workflow_id}-1-0", {}).get("status")
            == "succeeded"
        ),
        30,
        "the killed member's results row",
    )


def test_a_chord_completes_after_its_job_manager_and_workers_are_killed(
    stack: WorkflowStack, tmp_path: Path
) -> None:
    workflow_id, ran, log = _killed_while_gated(
        stack, tmp_path, "gated_chord", "m1", children_too=True, settled=("0-0", "0-2")
    )
    assert stack.client("wait", workflow_id)["result"] == 11  # total([2, 5, 4])
    assert ran["total [2, 5, 4]"] == 1, lines(log)  # the callback ran once, with every value
    assert (ran["start m1"], ran["done m1"], ran["add 1 1"], ran["add 2 2"]) == (2, 1, 1, 1)
    assert [s["completions"] for s in stack.steps(workflow_id)] == [1, 1, 1, 1]


def test_a_member_run_twice_sends_the_next_stage_once(stack: WorkflowStack, tmp_path: Path) -> None:
    # Only the job manager dies: its worker finishes member b and sends the next stage;
    # the router hands b out again, and that run's send of the next stage is refused.
    workflow_id, ran, log = _killed_while_gated(
        stack, tmp_path, "gated_chain", "b", children_too=False, settled=("0-0",)
    )
    wait_for(lambda: Counter(lines(log))["done b"] == 2, 30, "member b's second run")
    ran = Counter(lines(log))
    assert ran == Counter({"add 1 2": 1, "start b": 2, "done b": 2, "double 3": 1}), lines(log)
    assert stack.client("wait", workflow_id)["result"] == 6
    wait_for(
        lambda: [s["completions"] for s in stack.steps(workflow_id)] == [1, 2, 1],
        30,
        "the second run of b to be committed",
    )
    assert Counter(lines(log))["double 3"] == 1
