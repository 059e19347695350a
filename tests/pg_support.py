"""A real PostgreSQL for the tests of the PostgreSQL journal and of router groups.

The server is the one on this machine (``scripts/test.sh`` starts it), reached
by ``EMQ_TEST_PG_DSN`` (default: user postgres, database test on
127.0.0.1:5432). Each test gets a group name of its own, so its journal
schema (``emq_<group>``) is its own, and drops it afterwards. Without a
server these tests are skipped with the reason, except under CI (``CI=true``),
where a missing server is a failure: there it must be there.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

import pytest

from benchmarks._ports import free_port

DSN = os.environ.get(
    "EMQ_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test?connect_timeout=5"
)


def require_postgres() -> str:
    """The DSN of a reachable server; skip (fail under CI) when there is none."""
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - the test extra installs it
        _missing(f"psycopg is not installed ({exc}); pip install -e '.[test]'")
    try:
        with psycopg.connect(DSN) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        _missing(f"no PostgreSQL at {DSN}: {exc}".strip())
    return DSN


def _missing(reason: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def drop_group(dsn: str, group: str) -> None:
    """Drop everything a group left in the database (its schema)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "emq_{group}" CASCADE')


@pytest.fixture
def pg_dsn() -> str:
    return require_postgres()


@pytest.fixture
def pg_group(pg_dsn: str) -> Iterator[str]:
    """A group name no other test uses; its schema is dropped afterwards."""
    group = "t" + uuid.uuid4().hex[:12]
    yield group
    drop_group(pg_dsn, group)


def started_at(dsn: str) -> datetime | None:
    """When the server at ``dsn`` (last) started; None when it does not answer."""
    import psycopg

    try:
        with psycopg.connect(dsn, connect_timeout=2) as conn:
            row = conn.execute("SELECT pg_postmaster_start_time()").fetchone()
    except psycopg.Error:
        return None
    return None if row is None else row[0]  # type: ignore[no-any-return]


def _bindir() -> Path | None:
    """The directory of ``initdb``/``pg_ctl``: ``EMQ_TEST_PG_BINDIR``, ``pg_config --bindir``,
    the newest ``/usr/lib/postgresql/<version>/bin`` (Debian keeps them off ``PATH``)."""
    candidates = [os.environ.get("EMQ_TEST_PG_BINDIR", "")]
    if shutil.which("pg_config"):
        done = subprocess.run(
            ["pg_config", "--bindir"], capture_output=True, text=True, check=False
        )
        candidates.append(done.stdout.strip())
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: p.parent.name)
    candidates += [str(p) for p in reversed(debian)]
    for candidate in candidates:
        if candidate and (Path(candidate) / "initdb").is_file():
            return Path(candidate)
    return None


class PrivateServer:
    """A PostgreSQL server of one test's own, for tests that restart or kill it.

    ``initdb`` in a new temporary directory, listening on 127.0.0.1 on a free
    port with its unix socket in that directory: stopping it drops nobody
    else's connections, unlike the machine's server that the other tests and
    other programs share. As root it runs as the ``postgres`` user (the server
    refuses to run as root), so its directory is that user's.
    """

    def __init__(self) -> None:
        bindir = _bindir()
        if bindir is None:
            _missing("no initdb (set EMQ_TEST_PG_BINDIR to PostgreSQL's bin directory)")
        self.bindir = bindir
        self.user: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            try:
                self.user = pwd.getpwnam("postgres")
            except KeyError:
                _missing("running as root and there is no postgres user to run a server as")
        # Not pytest's tmp_path: its parents are root's alone (0700), out of the
        # postgres user's reach.
        self.dir = Path(tempfile.mkdtemp(prefix="emq-pg-"))
        if self.user is not None:
            os.chown(self.dir, self.user.pw_uid, self.user.pw_gid)
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.port = free_port()
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres?connect_timeout=5"

    def start(self) -> None:
        """Create the cluster and start it."""
        init = ["-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"]
        self._run("initdb", "-D", self.data, *init)
        self.pg_ctl("start")

    def pg_ctl(self, action: str) -> None:
        """``pg_ctl start|stop|restart`` of this server, waiting until it is done."""
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        wait = ["-w", "-t", "120", "-m", "fast"]
        self._run("pg_ctl", action, "-D", self.data, "-l", self.log, *wait, "-o", options)

    def _run(
        self, program: str, *args: str | Path, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run one of the server's programs, as its owner."""
        owner: dict[str, Any] = {}
        if self.user is not None:
            owner = {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}
        done = subprocess.run(
            [str(self.bindir / program), *map(str, args)],
            cwd=self.dir,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
            **owner,
        )
        assert done.returncode == 0 or not check, (
            f"{program} {args}: {done.stdout}{done.stderr}{self.server_log()}"
        )
        return done

    def server_log(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def close(self) -> None:
        """Stop the server (whatever state the test left it in) and remove its directory."""
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "stop", "-D", self.data, "-m", "immediate", check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def private_pg() -> Iterator[PrivateServer]:
    """A :class:`PrivateServer`, stopped and removed after the test."""
    server = PrivateServer()
    try:
        server.start()
        yield server
    finally:
        server.close()
