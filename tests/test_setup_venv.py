"""What ``make demo`` and ``make test`` install into ``.venv`` (scripts/setup-venv.sh).

The scripts run in a copy of the checkout whose ``.venv/bin/python`` only writes
down how it was called: what pip was asked to install, and what ran after.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import ROOT

DEMO = "-e .[example]"
TESTS = "-e .[test,lint]"
PEER = "--no-deps eventmq==0.3.13"


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The scripts and pyproject.toml, and a .venv whose python records its calls."""
    (tmp_path / "scripts").mkdir()
    for name in ("setup-venv.sh", "demo.sh"):
        shutil.copy2(ROOT / "scripts" / name, tmp_path / "scripts" / name)
    shutil.copy2(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\necho "$*" >> {tmp_path / "calls"}\n')
    python.chmod(0o755)
    return tmp_path


def run(checkout: Path, *args: str) -> list[str]:
    """Run a script of the copy; the python calls it made (pip's or the demo's)."""
    calls = checkout / "calls"
    calls.unlink(missing_ok=True)
    done = subprocess.run(
        args, cwd=checkout, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return calls.read_text().splitlines() if calls.exists() else []


def installed(calls: list[str], what: str) -> bool:
    """Whether one of ``calls`` was a pip install naming ``what``."""
    return any(c.startswith("-m pip install") and what in c for c in calls)


def test_the_demo_installs_what_it_runs_and_no_test_tools(checkout: Path) -> None:
    calls = run(checkout, "scripts/demo.sh", "--port", "8017")
    assert installed(calls, DEMO), calls
    assert not installed(calls, TESTS) and not installed(calls, PEER), calls
    assert calls[-1] == "-m example_project.demo --port 8017"
    # Installed once: a second demo starts at once.
    assert run(checkout, "scripts/demo.sh") == ["-m example_project.demo"]


def test_make_test_after_the_demo_installs_the_test_tools(checkout: Path) -> None:
    run(checkout, "scripts/setup-venv.sh", "demo")
    calls = run(checkout, "scripts/setup-venv.sh")  # what make test and make venv run
    assert installed(calls, TESTS) and installed(calls, PEER), calls
    # The test tools include the demo's packages: nothing more for either.
    assert run(checkout, "scripts/setup-venv.sh") == []
    assert run(checkout, "scripts/setup-venv.sh", "demo") == []


def test_a_changed_pyproject_installs_again(checkout: Path) -> None:
    run(checkout, "scripts/setup-venv.sh")
    with (checkout / "pyproject.toml").open("a") as file:
        file.write("\n# changed\n")
    assert installed(run(checkout, "scripts/setup-venv.sh", "demo"), DEMO)
    assert installed(run(checkout, "scripts/setup-venv.sh"), TESTS)
