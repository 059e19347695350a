"""A router and job managers (``python -m django emq_*``) on loopback, a SQLite results
file, and the client process of the workflow tests (:mod:`.workflow_client`)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.pg_support import DSN as PG_DSN
from tests.support import ROOT, Proc, clean_environ, migrated_env
from tests.system.chaos.support import descendants, kill_if_same

SETTINGS = "tests.system.e2e.workflow_settings"
ANY_PORT = "tcp://127.0.0.1:*"


def db_env(tmp: Path) -> dict[str, str]:
    """A migrated SQLite file and the environment that selects it."""
    return migrated_env(
        {
            "DJANGO_SETTINGS_MODULE": SETTINGS,
            "EMQ_WF_DB": str(tmp / "db.sqlite3"),
            "PYTHONPATH": str(ROOT),
            # A dead job manager is noticed within 2 s, and its jobs handed out again.
            "EMQ_HEARTBEAT_INTERVAL": "0.5",
            "EMQ_HEARTBEAT_TIMEOUT": "2",
        }
    )


class WorkflowStack:
    def __init__(self, env: dict[str, str], journal: Path) -> None:
        self.env = {**env, "EMQ_JOURNAL_PATH": str(journal)}
        self.db = Path(env["EMQ_WF_DB"])
        self.procs: list[Proc] = []
        self.jobmanagers: list[Proc] = []
        #: Worker processes of job managers killed (pid, start time), cleaned up at stop.
        self.orphans: list[tuple[int, str]] = []
        self._client: subprocess.Popen[str] | None = None
        router = self._start(
            "emq_router", "--frontend", ANY_PORT, "--backend", ANY_PORT, "--admin", ANY_PORT
        )
        ready = router.wait_output(r"router ready: frontend=(\S+) backend=(\S+) admin=(\S+)")
        self.frontend, self.backend = ready.group(1), ready.group(2)
        self.env["EMQ_BROKER_ADDR"] = self.frontend  # workers send the next stages there

    def _start(self, *args: str) -> Proc:
        proc = Proc([sys.executable, "-m", "django", *args], env=self.env)
        self.procs.append(proc)
        return proc

    def start_jobmanager(self, concurrency: int = 3, prefetch: int | None = None) -> Proc:
        """A job manager; ``prefetch=0``: no job waits in a busy worker's pipe."""
        more = [] if prefetch is None else ["--prefetch", str(prefetch)]
        jm = self._start(
            "emq_jobmanager", "--broker", self.backend, "--concurrency", str(concurrency), *more
        )
        jm.wait_output(r"jobmanager ready: ", timeout=60)
        self.jobmanagers.append(jm)
        return jm

    def kill_jobmanager(self, jm: Proc, *, children_too: bool) -> None:
        """SIGKILL ``jm`` (and its worker processes, as when its host dies)."""
        workers = descendants(jm.pid)
        self.orphans.extend(workers)
        os.kill(jm.pid, signal.SIGKILL)
        jm.popen.wait(10)
        if children_too:
            for pid, started in workers:
                kill_if_same(pid, started)

    def client(self, *args: str, timeout: float = 90) -> Any:
        """One command of the client process (started on first use, kept for the next)."""
        if self._client is None:
            self._client = subprocess.Popen(
                [sys.executable, "-m", "tests.system.e2e.workflow_client", "serve"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=ROOT,
                env={**clean_environ(), **self.env},
            )
        assert self._client.stdin is not None and self._client.stdout is not None
        self._client.stdin.write(json.dumps(list(args)) + "\n")
        self._client.stdin.flush()
        answer = self._client.stdout.readline()
        assert answer, f"the client process died on {args}\n{self.logs()}"
        return json.loads(answer)

    def query(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        pg_name = self.env.get("EMQ_WF_PG_NAME")
        if pg_name:
            import psycopg
            from psycopg.rows import dict_row

            with psycopg.connect(pg_dsn(pg_name), row_factory=dict_row) as pg:
                return pg.execute(sql.replace("?", "%s"), params).fetchall()
        with sqlite3.connect(self.db, timeout=10) as conn:
            conn.row_factory = sqlite3.Row
            return [dict(row) for row in conn.execute(sql, params).fetchall()]

    def workflow(self, workflow_id: str) -> dict[str, Any]:
        rows = self.query(
            "SELECT * FROM django_eventmq_workflow WHERE workflow_id = ?", workflow_id
        )
        assert rows, f"no workflow {workflow_id}"
        return rows[0]

    def steps(self, workflow_id: str) -> list[dict[str, Any]]:
        return self.query(
            "SELECT s.* FROM django_eventmq_workflowstep s JOIN django_eventmq_workflow w"
            " ON s.workflow_id = w.id WHERE w.workflow_id = ? ORDER BY s.stage, s.member",
            workflow_id,
        )

    def result_rows(self, workflow_id: str) -> dict[str, dict[str, Any]]:
        rows = self.query(
            "SELECT * FROM django_eventmq_jobresult WHERE msgid LIKE ?", f"wf-{workflow_id}-%"
        )
        return {row["msgid"]: row for row in rows}

    def logs(self) -> str:
        return "\n".join(f"--- {p.args[3]}\n{p.output()[-3000:]}" for p in self.procs)

    def stop(self) -> None:
        if self._client is not None:
            self._client.kill()
            self._client.wait(10)
        for proc in reversed(self.procs):
            proc.stop()
        for pid, started in self.orphans:
            kill_if_same(pid, started)


def pg_dsn(name: str) -> str:
    """The DSN of database ``name`` on the test server (``tests/pg_support.py``'s)."""
    return urlsplit(PG_DSN)._replace(path=f"/{name}").geturl()


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []
