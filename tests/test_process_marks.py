"""The ``process`` marker finds what starts a process, and only that (tests/process_marks.py)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from tests.process_marks import _starts_process
from tests.support import Proc, python_module
from tests.system.chaos.support import start_router  # starts a router process


def _starts_a_command() -> None:
    Proc(python_module("--help")).stop()


def _runs_a_command() -> None:
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def _imports_proc_inside() -> None:
    from tests.support import Proc as Started

    Started(python_module("--help")).stop()


def _through_a_helper() -> None:
    _starts_a_command()


def _a_router_process() -> None:
    start_router()


def _threads_only(start_router: Any) -> None:
    """A parameter named like a process helper (the thread router's fixture) is not it."""
    start_router()


def _pure() -> int:
    return sum(range(3))


def test_what_starts_a_process_is_found_through_helpers_and_local_imports() -> None:
    for starts in (
        _starts_a_command,
        _runs_a_command,
        _imports_proc_inside,
        _through_a_helper,
        _a_router_process,
    ):
        assert _starts_process(starts), starts.__name__
    assert not _starts_process(_threads_only)
    assert not _starts_process(_pure)
