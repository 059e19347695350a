"""Runs the atheris decoder target for a bounded number of iterations (CI).

Skipped when atheris is not installed (``pip install atheris``). The target
runs in a subprocess: a crash there is a failed test here, not a dead pytest.
The iteration count and the crashes found are printed in pytest's terminal
summary ("fuzzing" section, see conftest.py), with or without ``-s``.

Longer runs by hand: ``EMQ_FUZZ_RUNS=2000000 EMQ_FUZZ_BUDGET=3600 pytest
tests/system/fuzz/test_atheris.py``, or the target itself (see its docstring).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import ROOT

pytest.importorskip("atheris")

TARGET = Path(__file__).with_name("fuzz_decoder.py")
#: Iterations in CI; ``EMQ_FUZZ_RUNS`` changes it.
RUNS = int(os.environ.get("EMQ_FUZZ_RUNS", "20000"))
#: Seconds the fuzzer may take (20,000 runs take a few seconds); ``EMQ_FUZZ_BUDGET``.
BUDGET = float(os.environ.get("EMQ_FUZZ_BUDGET", "240"))
#: Artifacts libFuzzer writes for a crash, a hang or running out of memory.
FINDINGS = ("crash-*", "timeout-*", "oom-*", "leak-*")


def _runs_done(output: str) -> int:
    """Iterations libFuzzer reports: its final "Done N runs", else its last "#N" status."""
    done = re.search(r"Done (\d+) runs", output)
    if done is not None:
        return int(done.group(1))
    progress = re.findall(r"^#(\d+)\s", output, re.MULTILINE)
    return int(progress[-1]) if progress else 0


def _text(captured: str | bytes | None) -> str:
    """Output captured before a timeout (bytes on some Pythons even with ``text=True``)."""
    if isinstance(captured, bytes):
        return captured.decode("utf-8", "replace")
    return captured or ""


# Its own bound (BUDGET), above pytest-timeout's global 120 s.
@pytest.mark.timeout(BUDGET + 60)
def test_decoder_survives_coverage_guided_fuzzing(
    tmp_path: Path, fuzz_report: Callable[[str], None]
) -> None:
    try:
        result = subprocess.run(
            [
                sys.executable,
                str(TARGET),
                f"-runs={RUNS}",
                "-seed=1",
                "-max_len=512",
                f"-artifact_prefix={tmp_path}/",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=BUDGET,
        )
    except subprocess.TimeoutExpired as exc:
        partial = _text(exc.stdout) + _text(exc.stderr)
        fuzz_report(f"atheris: stopped after {BUDGET:g}s at {_runs_done(partial)} of {RUNS} runs")
        pytest.fail(f"the fuzzer did not finish {RUNS} runs within {BUDGET:g}s (EMQ_FUZZ_BUDGET)")
    output = result.stdout + result.stderr
    findings = sorted(p.name for pattern in FINDINGS for p in tmp_path.glob(pattern))
    crashes = len(findings) or (1 if result.returncode != 0 else 0)
    runs = _runs_done(output)
    fuzz_report(f"atheris: {runs} runs, {crashes} crashes ({TARGET.name}, seed 1)")
    assert crashes == 0, f"fuzzer found a crash {findings}:\n{output[-4000:]}"
    assert runs >= RUNS, output[-2000:]
