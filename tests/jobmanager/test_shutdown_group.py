"""SIGTERM to the job manager's whole process group (what systemd's default
``KillMode=control-group`` does): the running job still finishes and is
reported ``ok``, not ``died``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from django_eventmq.protocol import Done, Kbai
from tests.fake_router import SAMPLE, FakeRouter, body
from tests.support import ROOT, wait_for

GATED = "tests.jobs_fixtures.gated"


def test_sigterm_to_the_process_group_lets_the_running_job_finish(
    router: FakeRouter, tmp_path: Path
) -> None:
    log, gate = tmp_path / "log.txt", tmp_path / "gate"
    options = {
        "worker_addr": router.addr,
        "concurrency": 1,
        "prefetch": 0,
        "job_modules": [SAMPLE, GATED],
        "shutdown_grace": 60,
    }
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))
    with tempfile.TemporaryFile() as output:
        # A session of its own: the group signalled is the job manager's and its
        # children's, not this test's.
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.jobs_fixtures.jm_main", json.dumps(options)],
            stdout=output,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
            start_new_session=True,
        )

        def said(text: str) -> bool:
            output.seek(0)
            return text in output.read().decode(errors="replace")

        try:
            identity, _ = router.handshake(features=True)
            msgid = router.request(identity, body("gated", str(log), "job", str(gate), path=GATED))
            wait_for(lambda: log.exists(), 20, "the job started")
            os.killpg(proc.pid, signal.SIGTERM)
            # The job manager drains (the child had the signal too), or the job
            # was lost (the child died of it).
            wait_for(lambda: said("jobmanager stopping: waiting") or said("job lost"), 20, "drain")
            gate.touch()
            assert router.expect(Done, job_msgid=msgid)[1].status == "ok"
            router.expect(Kbai, timeout=10)
            assert proc.wait(20) == 0
            assert not said("job lost")
            assert log.read_text().split()[::3] == ["start", "done"]
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
