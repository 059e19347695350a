"""Fuzz runs report their figures in pytest's terminal summary, with or without ``-s``.

A test records a line with the ``fuzz_report`` fixture (``atheris: 20000 runs,
0 crashes``); :func:`pytest_terminal_summary` prints every recorded line in a
"fuzzing" section, so CI logs show the iteration count even when pytest
captures the test's output.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

_REPORTS = pytest.StashKey[list[str]]()


@pytest.fixture
def fuzz_report(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Record one line for the terminal summary."""
    lines = request.config.stash.setdefault(_REPORTS, [])
    return lines.append


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = terminalreporter.config.stash.get(_REPORTS, [])
    if lines:
        terminalreporter.section("fuzzing")
        for line in lines:
            terminalreporter.write_line(line)
