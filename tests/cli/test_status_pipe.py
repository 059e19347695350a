"""``emq_status | head``: a reader that leaves early ends the command quietly, with no
BrokenPipeError traceback, as any command-line tool writing into a pipe does.

Real processes (``manage.py emq_status``, ``python -m django_eventmq status``) read a real
router and write into a real pipe whose reading end is closed early.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support import ROOT, clean_environ, python_module

#: What Python prints when a write or its flush at exit meets a closed pipe.
PIPE_NOISE = ("Traceback", "BrokenPipeError", "Exception ignored")


def environ() -> dict[str, str]:
    return {
        **clean_environ(),
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
    }


def manage_py_status(admin: str, *extra: str) -> list[str]:
    return [sys.executable, str(ROOT / "manage.py"), "emq_status", "--admin", admin, *extra]


@pytest.mark.parametrize(
    "command",
    [manage_py_status, lambda admin: python_module("status", "--admin", admin)],
    ids=["manage.py", "python-m"],
)
def test_a_reader_gone_before_the_first_write_ends_it_quietly(command, router_admin):
    read_end, write_end = os.pipe()
    os.close(read_end)  # `| head` that has exited already
    try:
        done = subprocess.run(
            command(router_admin),
            stdout=write_end,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            env=environ(),
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert not any(noise in done.stderr for noise in PIPE_NOISE), done.stderr
    assert done.stderr == ""
    assert done.returncode == 0  # the router answered; the reader chose to stop reading


def test_watch_stops_when_its_reader_leaves(router_admin):
    # `emq_status --watch | head -1`: the first frame is read, then the reader goes; the
    # command must end by itself at its next write (it would redraw forever otherwise).
    proc = subprocess.Popen(
        manage_py_status(router_admin, "--watch", "--interval", "0.05"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=environ(),
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        assert first.startswith(f"router {router_admin} at ".encode()), first
        proc.stdout.close()
        returncode = proc.wait(timeout=60)
        stderr = proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not any(noise in stderr for noise in PIPE_NOISE), stderr
    assert returncode == 0
