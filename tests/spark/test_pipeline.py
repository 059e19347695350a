"""The example pipeline end to end: generate_events, the PySpark job, send_digest jobs in the DB."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
from collections import Counter
from decimal import Decimal

import pytest

from tests.spark.conftest import PYSPARK_MISSING, manage
from tests.support import ROOT

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
