"""The README's first command (`make demo`) brings the site up and shows jobs run."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from django_eventmq.protocol import constants as C
from tests.support import ROOT, free_port, tcp_addr


def demo_env(tmp_path: Path, router_addresses: bool = True) -> dict[str, str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}",
    }
    if router_addresses:
        frontend, backend = tcp_addr(), tcp_addr()
        env |= {
            "EMQ_FRONTEND_ADDR": frontend,
            "EMQ_BROKER_ADDR": frontend,
            "EMQ_BACKEND_ADDR": backend,
            "EMQ_WORKER_ADDR": backend,
            "EMQ_ADMIN_ADDR": tcp_addr(),
        }
    return env


def run_demo(env: dict[str, str], port: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "example_project.demo", "--once", "--port", str(port)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@contextmanager
def listening(port: int = 0) -> Iterator[int]:
    """A socket listening on 127.0.0.1:``port`` that never answers; yields its port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            pytest.skip(f"port {port} is in use here already")
        sock.listen()
        yield sock.getsockname()[1]


def test_demo_runs_a_job_started_from_a_view(tmp_path):
    result = run_demo(demo_env(tmp_path), free_port())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "the job manager ran them" in result.stdout
    assert "SentEmail #1: to=demo-" in result.stdout
    assert "Report #1: name='demo report" in result.stdout
    # The demo logged in to the admin with the password it prints (and found the
    # dashboard linked from the app's index); the password is not a fixed one.
    admin = re.search(r"admin: http://\S+/admin/ user 'demo' password '([^']+)'", result.stdout)
    assert admin is not None, result.stdout
    assert len(admin.group(1)) >= 12
    assert "/admin/django_eventmq/dashboard/" in result.stdout


def test_demo_says_at_once_that_its_web_port_is_taken(tmp_path):
    with listening() as port:
        result = run_demo(demo_env(tmp_path), port)
    assert result.returncode != 0
    assert f"port {port} on 127.0.0.1 is taken" in result.stderr, result.stdout + result.stderr
    assert "make demo PORT=" in result.stderr
    assert "migrating" not in result.stdout  # it stops before doing anything


def test_demo_moves_its_router_off_taken_default_ports(tmp_path):
    # Nothing set in the environment and the default frontend port taken: the
    # demo's router, job manager and web server agree on free ports instead.
    default_frontend = int(C.DEFAULT_FRONTEND_ADDR.rsplit(":", 1)[1])
    with listening(default_frontend):
        result = run_demo(demo_env(tmp_path, router_addresses=False), free_port())
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"router ports taken ({C.DEFAULT_FRONTEND_ADDR}" in result.stdout
    assert "the job manager ran them" in result.stdout
