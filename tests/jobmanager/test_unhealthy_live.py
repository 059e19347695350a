"""A job manager none of whose worker processes can start takes no jobs, gives back
those it took, and says so in ``emq_status`` (real router, job managers, workers)."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

from tests.jobmanager.test_autoscale_live import GATED, Stack, stack
from tests.support import ROOT, python_module, wait_for

__all__ = ["stack"]

#: Raises as it is imported: only the worker processes import it.
BROKEN = "tests.jobs_fixtures.broken"


def test_a_job_manager_whose_workers_cannot_start_gives_its_jobs_back(
    stack: Stack, tmp_path: Path
) -> None:
    bad = stack.jobmanager("--concurrency", "2", "--job-module", GATED, "--job-module", BROKEN)
    opened = tmp_path / "open"
    opened.touch()
    # Sent while its first worker process is starting: it takes two.
    msgids = [stack.send("gated", GATED, gate=opened) for _ in range(6)]
    bad.wait_output(r"worker child pid=\d+ failed to start: RuntimeError", 60)
    stack.jobmanager("--concurrency", "2", "--job-module", GATED)
    wait_for(lambda: stack.processed() == 6, 60, "6 jobs processed")
    assert Counter(m for m, _ in stack.lines("done")) == Counter(msgids)  # each once
    assert re.search(
        r"jobmanager takes no jobs: worker processes cannot start: RuntimeError: this job "
        r"module is broken on purpose; handed back 2 job\(s\) to the router",
        bad.output(),
    )
    status = subprocess.run(
        python_module("status", "--admin", stack.admin),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    warnings = [line for line in status.splitlines() if "takes no jobs" in line]
    assert len(warnings) == 1, status  # the broken one, not the healthy one
    assert warnings[0].startswith("WARNING: job manager jm-")
    assert "worker processes cannot start: RuntimeError: this job module is broken" in warnings[0]
