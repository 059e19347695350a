"""The README's first command (`make demo`) brings the site up and shows jobs run."""

from __future__ import annotations

import subprocess
import sys

from tests.support import ROOT, free_port, tcp_addr


def test_demo_runs_a_job_started_from_a_view(tmp_path):
    frontend, backend = tcp_addr(), tcp_addr()
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        "EMQ_FRONTEND_ADDR": frontend,
        "EMQ_BROKER_ADDR": frontend,
        "EMQ_BACKEND_ADDR": backend,
        "EMQ_WORKER_ADDR": backend,
        "EMQ_ADMIN_ADDR": tcp_addr(),
    }
    result = subprocess.run(
        [sys.executable, "-m", "example_project.demo", "--once", "--port", str(free_port())],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "the job manager ran them" in result.stdout
    assert "SentEmail #1: to=demo-" in result.stdout
    assert "Report #1: name='demo report" in result.stdout
