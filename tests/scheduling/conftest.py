"""Fixtures of the scheduler tests: a fake router, a throwaway PostgreSQL database."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.fake_router import FakeRouter
from tests.support import ROOT

PG_DSN = "host=127.0.0.1 port=5432 user=postgres connect_timeout=3"


@pytest.fixture
def router() -> Iterator[FakeRouter]:
    fake = FakeRouter()
    try:
        yield fake
    finally:
        fake.close()


@dataclass
class PgDatabase:
    """A migrated database of its own on the local PostgreSQL server."""

    name: str
    env: dict[str, str]

    def connect(self) -> Any:
        import psycopg

        return psycopg.connect(f"{PG_DSN} dbname={self.name}", autocommit=True)

    def query(self, sql: str, *params: object) -> list[tuple[Any, ...]]:
        with self.connect() as conn:
            cursor = conn.execute(sql, params)
            return list(cursor.fetchall()) if cursor.description else []


@pytest.fixture(scope="session")
def pg_database() -> Iterator[PgDatabase]:
    """A throwaway database for this test session, dropped at the end."""
    psycopg = pytest.importorskip("psycopg")
    try:
        admin = psycopg.connect(f"{PG_DSN} dbname=postgres", autocommit=True)
    except psycopg.OperationalError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"PostgreSQL is not reachable at 127.0.0.1:5432: {exc}")
    name = f"emq_sched_{uuid.uuid4().hex[:12]}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    env = {
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "EMQ_TEST_DB": "postgres",
        "EMQ_TEST_PG_NAME": name,
        "PYTHONPATH": str(ROOT),
    }
    try:
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=ROOT,
            env={**os.environ, **env},
            check=True,
            timeout=120,
        )
        yield PgDatabase(name, env)
    finally:
        # A new connection: one held for the whole session would not survive the
        # PostgreSQL restart of tests/system/ha_group/test_faults.py.
        with psycopg.connect(f"{PG_DSN} dbname=postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
