"""A job that starts a program and stops it, as jobs wrapping a tool do."""

from __future__ import annotations

import subprocess

from django_eventmq.client.jobs import job


@job
def stop_a_program() -> int:
    """Start ``sleep``, ask it to stop (SIGTERM), and return its exit status: -15 when
    the signal ended it, 0 if it was ignored (then it is killed after a while)."""
    program = subprocess.Popen(["sleep", "60"])
    program.terminate()
    try:
        return program.wait(timeout=5)
    except subprocess.TimeoutExpired:
        program.kill()
        program.wait()
        return 0
