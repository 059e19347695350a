"""Runs the atheris decoder target for a bounded number of iterations (CI).

Skipped when atheris is not installed (``pip install atheris``). The target
runs in a subprocess: a crash there is a failed test here, not a dead pytest.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

pytest.importorskip("atheris")

TARGET = Path(__file__).with_name("fuzz_decoder.py")
#: Iterations in CI; run the target by hand for millions (see its docstring).
RUNS = int(os.environ.get("EMQ_FUZZ_RUNS", "20000"))


def test_decoder_survives_coverage_guided_fuzzing(tmp_path: Path) -> None:
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
        timeout=600,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"fuzzer found a crash:\n{output[-4000:]}"
    done = re.search(r"Done (\d+) runs", output)
    assert done is not None and int(done.group(1)) >= RUNS, output[-2000:]
    assert not list(tmp_path.glob("crash-*"))
