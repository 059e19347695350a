"""A worker hooks module for the tests: notes each call in $EMQ_TEST_HOOKS_FILE."""

from __future__ import annotations

import os
from pathlib import Path


def _note(what: str) -> None:
    path = os.environ.get("EMQ_TEST_HOOKS_FILE")
    if path:
        with Path(path).open("a") as fh:
            fh.write(f"{what} {os.getpid()}\n")


def setup() -> None:
    _note("setup")


def before_job() -> None:
    _note("before")


def after_job() -> None:
    _note("after")
