"""The example Spark pipeline: daily digests per user, exported, then sent as jobs.

1. read the events (``manage.py generate_events`` writes them),
2. compute one digest per user and day (events, purchases, revenue),
3. write the export (Parquet) under ``--export/<run id>``,
4. send every row of the export as a ``send_digest`` job on the ``email``
   queue, with msgids ``<run id>:<user_id>,"<day>"``: running it again with
   the same run id (or Spark retrying a task) starts no job twice.

This module never imports Django: the driver and executors need pyspark,
pyarrow and pyzmq only. Run it from the repository root::

    python -m example_project.pipeline.digest_export                 # local[*]
    spark-submit --master spark://host:7077 --py-files deps.zip \\
        example_project/pipeline/digest_export.py --broker tcp://router:47291

(see docs/spark.md).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parent.parent.parent
if __package__ in (None, ""):
    # Run as a script (spark-submit): make the checkout importable.
    sys.path.insert(0, str(ROOT))

from django_eventmq.contrib.spark import EnqueueResult, enqueue_dataframe, local_session  # noqa: E402
from django_eventmq.contrib.spark.session import running_under_spark_submit  # noqa: E402
from django_eventmq.protocol.constants import DEFAULT_FRONTEND_ADDR  # noqa: E402

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: The job, by name: importing it would import Django.
SEND_DIGEST = "example_project.digests.jobs.send_digest"
DEFAULT_EVENTS = ROOT / "var" / "spark" / "events.parquet"
DEFAULT_EXPORT = ROOT / "var" / "spark" / "exports"


def daily_digests(events: DataFrame) -> DataFrame:
    """One row per user and day: how many events, purchases, and the revenue."""
    from pyspark.sql import functions as F

    return (
        events.withColumn("day", F.to_date("ts"))
        .groupBy("user_id", "email", "day")
        .agg(
            F.count(F.lit(1)).alias("events"),
            F.sum(F.when(F.col("event") == "purchase", 1).otherwise(0)).alias("purchases"),
            F.coalesce(F.sum("amount"), F.lit(0)).cast("decimal(12,2)").alias("revenue"),
        )
    )


def run(
    spark: SparkSession,
    *,
    events: str,
    export: str,
    run_id: str,
    broker: str,
    day: str | None = None,
    progress: bool = True,
) -> EnqueueResult:
    """Compute and write the export of ``run_id``, then send it as jobs."""
    from pyspark.sql import functions as F

    frame = spark.read.parquet(events)
    if day:
        frame = frame.where(F.to_date("ts") == F.lit(day).cast("date"))
    path = str(Path(export) / run_id)
    daily_digests(frame).write.mode("overwrite").parquet(path)
    # Send what was written: the export is the record of what was asked for.
    written = spark.read.parquet(path)
    return enqueue_dataframe(
        written,
        SEND_DIGEST,
        queue="email",
        broker=broker,
        run_id=run_id,
        key=["user_id", "day"],
        extra={"run_id": run_id},
        msgid_kwarg="job_id",
        progress=progress,
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--events", default=str(DEFAULT_EVENTS), help="events Parquet")
    parser.add_argument("--export", default=str(DEFAULT_EXPORT), help="export directory")
    parser.add_argument("--day", help="only this day (YYYY-MM-DD); default: every day")
    parser.add_argument(
        "--run-id", help="names the export and the job msgids (default: digest-<day or all>)"
    )
    parser.add_argument(
        "--broker",
        default=os.environ.get("EMQ_BROKER_ADDR", DEFAULT_FRONTEND_ADDR),
        help="the router's frontend (default: $EMQ_BROKER_ADDR or %(default)s)",
    )
    parser.add_argument(
        "--master", default="local[*]", help="Spark master when not under spark-submit"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    run_id = args.run_id or f"digest-{args.day or 'all'}"
    if running_under_spark_submit():
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.appName("digest-export").getOrCreate()
    else:
        spark = local_session("digest-export", args.master, python_path=[ROOT])
    try:
        result = run(
            spark,
            events=args.events,
            export=args.export,
            run_id=run_id,
            broker=args.broker,
            day=args.day,
        )
    finally:
        spark.stop()
    print(result)
    for queue, counts in sorted(result.queues.items()):
        for reason in counts.reasons:
            print(f"  {queue}: rejected because {reason}")
    return 1 if result.rejected else 0


if __name__ == "__main__":
    sys.exit(main())
