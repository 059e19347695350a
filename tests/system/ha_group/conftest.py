"""Fixtures of the router group tests: the real PostgreSQL (``pg_dsn``, ``pg_group``)
and :func:`running_group`, two members that stop when the test ends."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.pg_support import pg_dsn as pg_dsn
from tests.pg_support import pg_group as pg_group
from tests.system.ha_group.support import Group


@contextmanager
def running_group(dsn: str, group: str, workdir: Path, **kwargs: Any) -> Iterator[Group]:
    """A :class:`Group` (A leads, B stands by), stopped afterwards; its processes'
    output is printed then (pytest shows it when the test failed)."""
    made = Group(dsn, group, workdir, **kwargs)
    try:
        yield made
    finally:
        made.stop()
        print(made.outputs())
