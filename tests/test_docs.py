"""The documentation site builds with warnings as errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import ROOT

pytest.importorskip("sphinx", reason="sphinx is in the test extra; install it to build the docs")
pytest.importorskip("myst_parser", reason="myst-parser is in the test extra")


def test_docs_build_without_warnings(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            "docs",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "index.html").exists()
    assert (tmp_path / "api.html").exists()
