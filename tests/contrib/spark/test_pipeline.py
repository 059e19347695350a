"""The example pipeline end to end: generate_events, the PySpark job, send_digest jobs in the DB."""

from __future__ import annotations

import datetime as dt
import os
import re
import signal
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from decimal import Decimal

import pytest

from django_eventmq.protocol import constants as C
from example_project.pipeline.demo import Counts, wait_for_jobs
from tests.contrib.spark.conftest import PYSPARK_MISSING, manage
from tests.support import ROOT

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark", reason=PYSPARK_MISSING, exc_type=ImportError)

import pyarrow.parquet as pq  # noqa: E402

from example_project.pipeline import digest_export  # noqa: E402


@pytest.mark.timeout(300)  # Spark on a loaded machine (2 cores shared) passes 120 s
def test_events_become_an_export_and_one_digest_job_per_user_and_day(spark, stack, tmp_path):
    events = tmp_path / "events.parquet"
    done = subprocess.run(
        manage(
            "generate_events",
            "--rows",
            "3000",
            "--users",
            "40",
            "--days",
            "2",
            "--out",
            str(events),
        ),
        cwd=ROOT,
        env={**os.environ, **stack.env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = pq.read_table(events).to_pylist()
    per_user_day = Counter((r["user_id"], r["ts"].date()) for r in rows)
    purchases = [r for r in rows if r["event"] == "purchase"]

    result = digest_export.run(
        spark,
        events=str(events),
        export=str(tmp_path / "exports"),
        run_id="pipeline",
        broker=stack.frontend,
        progress=False,
    )

    assert (result.sent, result.acked, result.rejected) == (len(per_user_day),) * 2 + (0,)
    assert list((tmp_path / "exports" / "pipeline").glob("*.parquet"))  # the export
    stack.wait_done("pipeline", len(per_user_day))
    # What the jobs recorded adds up to the events generated.
    assert stack.digests("pipeline") == len(per_user_day)
    assert stack.most_deliveries("pipeline") == 1
    assert stack.count(
        "SELECT sum(events) FROM digests_digestsent WHERE run_id = 'pipeline'"
    ) == len(rows)
    assert stack.count(
        "SELECT sum(purchases) FROM digests_digestsent WHERE run_id = 'pipeline'"
    ) == len(purchases)
    cents = stack.count(
        "SELECT sum(CAST(round(revenue * 100) AS INTEGER)) FROM digests_digestsent "
        "WHERE run_id = 'pipeline'"
    )
    assert cents == sum(r["amount"] for r in purchases) * 100 == Decimal(cents)
    user, day = next(iter(per_user_day))
    assert (
        stack.count(
            "SELECT events FROM digests_digestsent WHERE msgid = ?",
            f'pipeline:{user},"{day.isoformat()}"',
        )
        == per_user_day[(user, day)]
    )
    assert isinstance(day, dt.date)


#: Logs in to the example site's admin with Django's test client and prints what
#: the DigestSent and JobResult change lists show (run with manage.py shell -c).
ADMIN_PAGES = """
from django.contrib.auth.models import User
from django.test import Client
user = User.objects.create_superuser("pipeline-admin", "a@example.com", "pw")
client = Client()
client.force_login(user)
for url in ("/admin/digests/digestsent/?run_id=pipeline-cmd",
            "/admin/django_eventmq/jobresult/?status__exact=succeeded"):
    page = client.get(url)
    print(url, page.status_code, page.content.decode().count("send_digest"),
          page.content.decode().count("@example.com"))
"""


@contextmanager
def default_port_taken(addr: str) -> Iterator[None]:
    """The port of ``addr`` taken for the block (by this socket, or by whatever holds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        with suppress(OSError):  # taken already: as good
            sock.bind(("127.0.0.1", int(addr.rsplit(":", 1)[1])))
            sock.listen()
        yield


def run_in_own_group(
    command: list[str], env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in a process group of its own, stopped whole if the test ends first
    (the demo's router, job manager and Spark driver are its children)."""
    proc = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)


@pytest.mark.timeout(450)  # Spark under a loaded machine: the command's own limit is 400 s
def test_make_pipeline_runs_everything_from_one_command(tmp_path):
    """``make pipeline``: one command; digests recorded, shown in the admin as finished jobs.

    No router address is set and the router's default frontend port is taken (another
    router): the pipeline moves its router, job manager and Spark job to free ports, as
    ``make demo`` does."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("EMQ_")},
        "DATABASE_URL": f"sqlite:///{tmp_path / 'site.sqlite3'}",
        "ALLOWED_HOSTS": "testserver,127.0.0.1",
        "EMQ_JOURNAL_PATH": str(tmp_path / "journal.sqlite3"),
    }
    command = [
        *(sys.executable, "-m", "example_project.pipeline.demo"),
        *("--rows", "2000", "--users", "30", "--days", "2", "--master", "local[2]"),
        *("--run-id", "pipeline-cmd", "--data", str(tmp_path / "spark"), "--timeout", "180"),
    ]
    with default_port_taken(C.DEFAULT_FRONTEND_ADDR):
        done = run_in_own_group(command, env, timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"router ports taken ({C.DEFAULT_FRONTEND_ADDR}" in done.stdout, done.stdout
    digests = int(re.search(r"the export has ([\d,]+) digests", done.stdout)[1].replace(",", ""))
    assert 30 <= digests <= 60  # 30 users over 2 days
    assert f"{digests} digests recorded ({digests} new this run)" in done.stdout
    assert f"{digests} send_digest jobs succeeded in JobResult" in done.stdout
    assert "digests delivered more than once: 0" in done.stdout

    shown = subprocess.run(
        manage("shell", "-c", ADMIN_PAGES),
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "example_project.settings"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert shown.returncode == 0, shown.stdout + shown.stderr
    lines = dict(line.split(" ", 1) for line in shown.stdout.splitlines() if line.startswith("/"))
    status, _, emails = lines["/admin/digests/digestsent/?run_id=pipeline-cmd"].split()
    assert status == "200" and int(emails) >= min(digests, 100)
    status, jobs, _ = lines["/admin/django_eventmq/jobresult/?status__exact=succeeded"].split()
    assert status == "200" and int(jobs) >= min(digests, 100)


def test_the_summary_waits_for_the_last_batch_of_results():
    # Every digest is written while the job manager has not yet written the last batch of
    # JobResult rows (it writes them in batches, after the jobs): the summary waits for it.
    seen = iter([Counts(60, 53), Counts(60, 53), Counts(60, 60)])
    asked = []

    def counts() -> Counts:
        asked.append(next(seen))
        return asked[-1]

    assert wait_for_jobs(counts, 60, results=True, timeout=60) == Counts(60, 60)
    assert len(asked) == 3
    # Not recording every outcome (RECORD_ALL_RESULTS off): the digests are all it waits for.
    assert wait_for_jobs(lambda: Counts(60, 0), 60, results=False, timeout=60) == Counts(60, 0)


def test_results_that_never_come_end_the_wait_saying_what_is_missing():
    with pytest.raises(SystemExit) as gave_up:
        wait_for_jobs(lambda: Counts(60, 53), 60, results=True, timeout=0.2)
    assert str(gave_up.value).startswith(
        "demo: gave up after 0s waiting for 60 send_digest jobs: 60 of 60 digests recorded, "
        "53 of 60 succeeded in JobResult (logs in "
    )
    assert str(gave_up.value).endswith("var/pipeline)")
