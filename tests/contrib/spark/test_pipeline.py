"""The example pipeline end to end: generate_events, the PySpark job, send_digest jobs in the DB."""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys
from collections import Counter
from decimal import Decimal

import pytest

from tests.contrib.spark.conftest import PYSPARK_MISSING, manage
from tests.support import ROOT, tcp_addr

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark", reason=PYSPARK_MISSING, exc_type=ImportError)

import pyarrow.parquet as pq  # noqa: E402

from example_project.pipeline import digest_export  # noqa: E402


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


def test_make_pipeline_runs_everything_from_one_command(tmp_path):
    """``make pipeline``: one command; digests recorded, shown in the admin as finished jobs."""
    frontend, backend = tcp_addr(), tcp_addr()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("EMQ_")},
        "DATABASE_URL": f"sqlite:///{tmp_path / 'site.sqlite3'}",
        "ALLOWED_HOSTS": "testserver,127.0.0.1",
        "EMQ_FRONTEND_ADDR": frontend,
        "EMQ_BROKER_ADDR": frontend,
        "EMQ_BACKEND_ADDR": backend,
        "EMQ_WORKER_ADDR": backend,
        "EMQ_ADMIN_ADDR": tcp_addr(),
        "EMQ_JOURNAL_PATH": str(tmp_path / "journal.sqlite3"),
    }
    command = [
        *(sys.executable, "-m", "example_project.pipeline.demo"),
        *("--rows", "2000", "--users", "30", "--days", "2", "--master", "local[2]"),
        *("--run-id", "pipeline-cmd", "--data", str(tmp_path / "spark"), "--timeout", "180"),
    ]
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
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
