"""Pure helpers of the benchmarks' summaries: medians over runs, targets judged.

No processes, no sockets: tests/benchmarks/test_summary.py covers them.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def median_of(runs: list[Any]) -> Any:
    """The median of several runs' figures, shaped like one run.

    Dicts are merged key by key (keys every run has), numbers give their
    median, booleans are true only if true in every run, anything else
    (None, strings, lists) is the first run's.
    """
    if not runs:
        return None
    first = runs[0]
    if isinstance(first, dict):
        keys = [k for k in first if all(isinstance(r, dict) and k in r for r in runs)]
        return {k: median_of([r[k] for r in runs]) for k in keys}
    if isinstance(first, bool):
        return all(bool(r) for r in runs)
    if isinstance(first, int | float) and all(
        isinstance(r, int | float) and not isinstance(r, bool) for r in runs
    ):
        return statistics.median(runs)
    return first


@dataclass(frozen=True)
class Target:
    """One of the issue's targets: ``value`` against ``goal`` (at least, or at most)."""

    label: str
    value: float | None
    goal: float
    at_most: bool = False
    unit: str = ""

    @property
    def met(self) -> bool | None:
        """True or False, or None when the figure was not measured."""
        if self.value is None:
            return None
        return self.value <= self.goal if self.at_most else self.value >= self.goal

    @property
    def verdict(self) -> str:
        return {True: "MET", False: "NOT MET", None: "NOT MEASURED"}[self.met]

    def line(self) -> str:
        """``label: MET (figure; target >= goal)`` for the printed summary."""
        sign = "<=" if self.at_most else ">="
        return (
            f"{self.label}: {self.verdict} "
            f"({_number(self.value, self.unit)}; target {sign} {_number(self.goal, self.unit)})"
        )


def _number(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "ms":
        return f"{value:.3f} ms"
    return f"{value:,.0f}{unit}"


def write_json(path: Path | None, results: Any) -> None:
    """A script's ``--json FILE``: the figures written there, and a line saying so."""
    if path is not None:
        path.write_text(json.dumps(results, indent=2) + "\n")
        print(f"\nwrote {path}")
