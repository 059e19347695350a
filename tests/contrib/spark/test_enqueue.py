"""enqueue_dataframe with a real local Spark session, router and job manager.

Rows become ``send_digest`` jobs that the job manager runs; each job records
its msgid once and counts further deliveries, so a doubled job shows as
``deliveries > 1``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from tests.contrib.spark.conftest import PYSPARK_MISSING
from tests.support import tcp_addr, wait_for
from tests.system.chaos.jobs import RECORD_ENV
from tests.system.chaos.support import (
    admin_call,
    recorded,
    start_jobmanager,
    start_router,
    wait_recorded,
)

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark", reason=PYSPARK_MISSING, exc_type=ImportError)

from pyspark import TaskContext  # noqa: E402
from pyspark.sql import DataFrame  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from django_eventmq.contrib.spark import Progress, enqueue_dataframe  # noqa: E402

SEND_DIGEST = "example_project.digests.jobs.send_digest"


def digests(spark: Any, rows: int, partitions: int = 2) -> DataFrame:
    """``rows`` digest rows with the columns send_digest takes."""
    return spark.range(0, rows, 1, partitions).select(
        F.col("id").alias("user_id"),
        F.concat(F.lit("user"), F.col("id"), F.lit("@example.com")).alias("email"),
        F.lit("2024-05-01").cast("date").alias("day"),
        (F.col("id") % 17).cast("int").alias("events"),
        (F.col("id") % 3).cast("int").alias("purchases"),
        (F.col("id") / 7).cast("decimal(12,2)").alias("revenue"),
    )


def send(df: DataFrame, stack: Any, run_id: str, **options: Any) -> Any:
    options.setdefault("progress", False)
    return enqueue_dataframe(
        df,
        SEND_DIGEST,
        queue="email",
        broker=stack.frontend,
        run_id=run_id,
        key=["user_id", "day"],
        extra={"run_id": run_id},
        msgid_kwarg="job_id",
        **options,
    )


def test_every_row_becomes_one_job_that_runs_once(spark, stack):
    seen: list[Progress] = []
    result = send(digests(spark, 200), stack, "once", progress=seen.append, progress_interval=0.2)

    assert (result.sent, result.acked, result.rejected) == (200, 200, 0)
    assert set(result.queues) == {"email"}
    assert result.partitions == 2
    assert result.retried_partitions == 0
    # Progress was reported while it ran, then the final counts.
    running = [p for p in seen if not p.finished]
    assert any(p.tasks_total == 2 for p in running), seen
    assert seen[-1].finished and seen[-1].queues == {"email": [200, 200, 0]}
    stack.wait_done("once", 200)
    assert stack.digests("once") == 200
    assert stack.most_deliveries("once") == 1
    # The job got the row's values, Decimal and date columns included.
    assert (
        stack.count(
            "SELECT count(*) FROM digests_digestsent WHERE run_id = 'once' AND user_id = 70 "
            "AND day = '2024-05-01' AND revenue = '10' AND msgid = 'once:70,\"2024-05-01\"'"
        )
        == 1
    )


def fail_first_attempt(batches: Iterator[Any]) -> Iterator[Any]:
    """Partition 0's first attempt fails after its first two batches (100 rows) went out."""
    context = TaskContext.get()
    assert context is not None
    for index, batch in enumerate(batches):
        if index == 2 and context.partitionId() == 0 and context.attemptNumber() == 0:
            raise RuntimeError("forced failure of the first attempt, after sending 100 rows")
        yield batch


def test_a_task_retried_after_sending_does_not_run_any_job_twice(spark, stack):
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
    try:
        # window=8: when the failure hits, the router has acknowledged (so
        # holds) all but the last 8 of the rows already sent.
        result = send(
            digests(spark, 300), stack, "retried", window=8, map_batches=fail_first_attempt
        )
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")

    assert result.retried_partitions == 1  # Spark ran partition 0 again
    assert (result.sent, result.acked, result.rejected) == (300, 300, 0)
    stack.wait_done("retried", 300)
    assert stack.digests("retried") == 300
    # The first attempt's ~100 msgids were sent twice; each job ran once.
    assert stack.most_deliveries("retried") == 1, stack.logs()


def test_the_same_export_sent_again_runs_nothing_again(spark, stack):
    df = digests(spark, 150)
    first = send(df, stack, "again")
    stack.wait_done("again", 150)
    second = send(df, stack, "again")

    assert first.acked == second.acked == 150
    stack.wait_done("again", 150)
    assert stack.digests("again") == 150
    assert stack.most_deliveries("again") == 1, stack.logs()


def test_counts_are_per_queue_when_rows_name_their_queue(spark, stack, capsys):
    df = digests(spark, 120).withColumn(
        "queue", F.when(F.col("user_id") % 4 == 0, "reports").otherwise("email")
    )
    result = send(df, stack, "per-queue", queue_column="queue", progress=True)

    assert {q: (c.sent, c.acked, c.rejected) for q, c in result.queues.items()} == {
        "email": (90, 90, 0),
        "reports": (30, 30, 0),
    }
    assert "reports: 30 sent, 30 acked" in str(result)
    # progress=True: lines on stderr (not a terminal here), the last one final.
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("django-eventmq spark: done; email 90 sent/90 acked/0 rejected")
    stack.wait_done("per-queue", 120, queue="reports")
    stack.wait_done("per-queue", 120, queue="email")


def test_a_missing_column_fails_before_spark_runs_anything(spark, stack):
    with pytest.raises(ValueError, match=r"no column\(s\) \['nope'\]"):
        send(digests(spark, 10), stack, "bad", kwargs=["user_id", "nope"])


def test_no_router_fails_the_spark_job_with_broker_unavailable(spark):
    from pyspark.errors import PySparkException

    with pytest.raises((PySparkException, Exception)) as info:
        enqueue_dataframe(
            digests(spark, 20, partitions=1),
            SEND_DIGEST,
            broker=tcp_addr(),  # nothing listens there
            run_id="nobody",
            key="user_id",
            give_up=0.5,
            ack_timeout=0.2,
            progress=False,
        )
    assert "BrokerUnavailable" in str(info.value)
    assert "answered nothing for 0.5s" in str(info.value)


def test_an_empty_dataframe_sends_nothing(spark, stack):
    result = send(digests(spark, 10, partitions=2).where("user_id < 0"), stack, "empty")
    assert result.queues == {}
    assert (result.sent, result.acked, result.rejected) == (0, 0, 0)
    assert "no rows" in str(result)


def test_a_retried_task_whose_jobs_were_stored_as_parcels_runs_each_job_once(spark, tmp_path):
    """No job manager while Spark sends, and a window of 10 jobs in memory: the
    router stores the batches whole (parcels); the retried partition's copies
    are the same BATCHes, known as such, and not counted. Started afterwards,
    the job manager runs each job once."""
    ran = tmp_path / "ran.txt"
    frontend, backend, admin = tcp_addr(), tcp_addr(), tcp_addr()
    procs = [start_router(frontend, backend, admin, tmp_path / "journal.db", EMQ_QUEUE_WINDOW="10")]
    try:
        df = spark.range(0, 300, 1, 2).select(F.concat(F.lit("t"), F.col("id")).alias("token"))
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
        try:
            result = enqueue_dataframe(
                df, "tests.system.chaos.jobs.record", queue="default", broker=frontend,
                run_id="parcels", key=["token"], window=40, map_batches=fail_first_attempt,
                progress=False,
            )  # fmt: skip
        finally:
            spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
        assert result.retried_partitions == 1
        assert (result.sent, result.acked, result.rejected) == (300, 300, 0)
        info = admin_call(admin, "MONITOR")
        assert info["parcels"] > 0
        assert info["queued"] == 300 and info["duplicates"] > 0  # the retried rows' copies
        procs.append(start_jobmanager(backend, concurrency=2, **{RECORD_ENV: str(ran)}))
        tokens = {f"t{i}" for i in range(300)}
        wait_recorded(ran, tokens, timeout=60)
        wait_for(lambda: admin_call(admin, "MONITOR")["queued"] == 0, 30, "the copies to go")
        info = admin_call(admin, "MONITOR")
        assert info["parcels"] == 0 and info["duplicates"] > 0
        assert Counter(recorded(ran)) == Counter(tokens)
    finally:
        for proc in reversed(procs):
            proc.stop()


def tokens_frame(spark: Any, prefix: str, rows: int) -> DataFrame:
    return spark.range(0, rows, 1, 2).select(F.concat(F.lit(prefix), F.col("id")).alias("token"))


def drained(admin: str) -> bool:
    info = admin_call(admin, "MONITOR")
    return info["queued"] == 0 and info["in_flight"] == 0


def export(df: DataFrame, frontend: str, run_id: str, **options: Any) -> Any:
    return enqueue_dataframe(
        df, "tests.system.chaos.jobs.record", queue="default", broker=frontend, run_id=run_id,
        key=["token"], window=40, progress=False, **options,
    )  # fmt: skip


def test_the_same_run_id_sent_again_into_a_router_holding_parcels_counts_nothing_twice(
    spark, tmp_path
):
    """The documented recovery, sending the same run_id again, into a router with
    no job manager that holds the export as parcels: its BATCHes are known as
    copies, so MONITOR counts the real jobs only and the high-water mark (450,
    below twice the export) is not reached. Each job then runs once."""
    ran = tmp_path / "ran.txt"
    frontend, backend, admin = tcp_addr(), tcp_addr(), tcp_addr()
    env = {"EMQ_QUEUE_WINDOW": "10", "EMQ_HIGH_WATER_MARK": "450"}
    procs = [start_router(frontend, backend, admin, tmp_path / "journal.db", **env)]
    try:
        df = tokens_frame(spark, "r", 400)
        first = export(df, frontend, "resent")
        assert (first.acked, first.rejected) == (400, 0)
        info = admin_call(admin, "MONITOR")
        assert (info["queued"], info["duplicates"]) == (400, 0) and info["parcels"] > 0
        again = export(df, frontend, "resent", give_up=10)
        assert (again.acked, again.rejected) == (400, 0)
        info = admin_call(admin, "MONITOR")
        assert (info["queued"], info["duplicates"], info["blocked"]) == (400, 400, False)
        procs.append(start_jobmanager(backend, concurrency=2, **{RECORD_ENV: str(ran)}))
        tokens = {f"r{i}" for i in range(400)}
        wait_recorded(ran, tokens, timeout=60)
        wait_for(lambda: drained(admin), 30, "the queue to drain")
        assert Counter(recorded(ran)) == Counter(tokens)
    finally:
        for proc in reversed(procs):
            proc.stop()


def test_a_full_router_fails_the_export_saying_it_is_full_and_what_to_do(spark, tmp_path):
    """Above its high-water mark (policy block) the router reads no client: the
    tasks fail with RouterFull, not with 'is emq_router running?'. The jobs it
    took run once each when a job manager starts."""
    from pyspark.errors import PySparkException

    ran = tmp_path / "ran.txt"
    frontend, backend, admin = tcp_addr(), tcp_addr(), tcp_addr()
    env = {"EMQ_QUEUE_WINDOW": "10", "EMQ_HIGH_WATER_MARK": "100"}
    procs = [start_router(frontend, backend, admin, tmp_path / "journal.db", **env)]
    try:
        with pytest.raises((PySparkException, Exception)) as info:
            # give_up 1 s: a router that reads nothing for that long is not
            # busy (it answers in milliseconds up to the mark); each of the
            # task's two attempts waits it out.
            export(tokens_frame(spark, "f", 300), frontend, "full", give_up=1, ack_timeout=0.5)
        text = str(info.value)
        assert "RouterFull" in text and f"the router at {frontend} is full" in text
        assert "queue 'default'" in text and "emq_jobmanager --queues default" in text
        assert "is emq_router running" not in text
        monitor = admin_call(admin, "MONITOR")
        assert monitor["blocked"] is True and 100 <= monitor["queued"] < 300
        procs.append(start_jobmanager(backend, concurrency=2, **{RECORD_ENV: str(ran)}))
        wait_for(lambda: drained(admin), 60, "the queue to drain")
        # What the router held, and maybe what the failed tasks' sockets had
        # passed it while it did not read: each once.
        done = recorded(ran)
        assert len(done) >= monitor["queued"] and len(set(done)) == len(done)
        assert set(done) <= {f"f{i}" for i in range(300)}
    finally:
        for proc in reversed(procs):
            proc.stop()
