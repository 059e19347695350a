"""Tests restart or kill a PostgreSQL server of their own, never the machine's.

The machine's server is shared (by the other test workers, and on a laptop or a
shared host by everything else): restarting it drops every connection of theirs.
"""

from __future__ import annotations

import re
from pathlib import Path

import psycopg

from tests.pg_support import DSN, PrivateServer, started_at
from tests.pg_support import private_pg as private_pg
from tests.support import ROOT

#: What restarts, stops or kills a system service, or the machine's cluster.
SERVICE_CONTROL = re.compile(r"pg_ctlcluster|systemctl|service\s+postgresql|[\"'/]pg_ctl[\"'\s]")


def test_a_private_server_restarts_and_the_machines_does_not(private_pg: PrivateServer) -> None:
    machines = started_at(DSN)  # None: no server on this machine
    first = started_at(private_pg.dsn)
    assert first is not None, private_pg.server_log()
    with psycopg.connect(private_pg.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (n int)")
        conn.execute("INSERT INTO kept VALUES (1), (2)")
    private_pg.pg_ctl("restart")
    second = started_at(private_pg.dsn)
    assert second is not None and second > first
    with psycopg.connect(private_pg.dsn) as conn:
        assert conn.execute("SELECT count(*) FROM kept").fetchone() == (2,)
    assert started_at(DSN) == machines
    # Its socket and files are in its own directory, removed afterwards.
    assert any(p.name.startswith(".s.PGSQL.") for p in private_pg.dir.iterdir())
    private_pg.close()
    assert not private_pg.dir.exists()


def test_no_test_or_benchmark_controls_the_machines_postgresql() -> None:
    """Only ``PrivateServer`` (pg_ctl on its own data directory) may stop a server."""
    found = []
    for top in ("tests", "benchmarks"):
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix not in (".py", ".sh") or path == Path(__file__):
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if SERVICE_CONTROL.search(line) and path.name != "pg_support.py":
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)
