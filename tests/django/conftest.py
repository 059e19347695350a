"""The Django tests start from no EMQ_* variables, whatever the shell running them set."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _no_emq_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("EMQ_"):
            monkeypatch.delenv(key)
