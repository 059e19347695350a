"""Send a DataFrame's rows as jobs: the driver side.

:func:`jobs_dataframe` plans the work: a ``mapInArrow`` whose function runs
on the executors, encodes each Arrow batch (:mod:`.encoding`) and sends it
with a :class:`~.sender.PipelinedSender`, and yields one statistics row per
partition and queue once the router has answered every msgid.
:func:`enqueue_dataframe` runs it, shows progress, and adds the statistics up.

Statistics come back as the rows of the DataFrame, not through accumulators:
Spark keeps only the output of the task attempt that succeeded, so a task
that failed and ran again is counted once. Running counts for the progress
line travel separately (:mod:`.progress`).
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

from django_eventmq.contrib.spark.encoding import JobLike, JobTarget, RowEncoder
from django_eventmq.contrib.spark.progress import Progress, ProgressPush, ProgressReporter
from django_eventmq.contrib.spark.sender import (
    DEFAULT_ACK_TIMEOUT,
    DEFAULT_GIVE_UP,
    DEFAULT_WINDOW,
    PipelinedSender,
    QueueCounts,
)
from django_eventmq.protocol import Headers

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: A function from a partition's batches to batches, run just before sending.
BatchMap = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]

#: Schema of the statistics rows (one per partition and queue).
STATS_SCHEMA = pa.schema(
    [
        ("partition", pa.int32()),
        ("attempt", pa.int32()),
        ("queue", pa.string()),
        ("sent", pa.int64()),
        ("acked", pa.int64()),
        ("rejected", pa.int64()),
        ("resent", pa.int64()),
        ("duplicates", pa.int64()),
        ("reasons", pa.list_(pa.string())),
    ]
)
STATS_DDL = (
    "partition int, attempt int, queue string, sent long, acked long, rejected long, "
    "resent long, duplicates long, reasons array<string>"
)


@dataclass(frozen=True)
class EnqueueResult:
    """What the router said about the jobs of one :func:`enqueue_dataframe` call."""

    run_id: str
    #: Per queue name.
    queues: dict[str, QueueCounts]
    #: Partitions that were sent.
    partitions: int
    #: Partitions whose successful attempt was not the first.
    retried_partitions: int
    seconds: float
    stats: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @property
    def sent(self) -> int:
        return sum(c.sent for c in self.queues.values())

    @property
    def acked(self) -> int:
        return sum(c.acked for c in self.queues.values())

    @property
    def rejected(self) -> int:
        return sum(c.rejected for c in self.queues.values())

    def __str__(self) -> str:
        per_queue = "; ".join(
            f"{q}: {c.sent:,} sent, {c.acked:,} acked, {c.rejected:,} rejected"
            for q, c in sorted(self.queues.items())
        )
        rate = self.acked / self.seconds if self.seconds > 0 else 0.0
        return (
            f"run {self.run_id}: {per_queue or 'no rows'} "
            f"({self.partitions} partition(s), {self.retried_partitions} retried, "
            f"{self.seconds:.1f}s, {rate:,.0f} jobs/s)"
        )


@dataclass(frozen=True)
class _SendTask:
    """Everything an executor needs, pickled with the task: no Django, no settings."""

    encoder: RowEncoder
    broker: str
    window: int
    ack_timeout: float
    give_up: float
    #: Where to push running counts (the driver's progress socket), if anywhere.
    progress: str | None
    map_batches: BatchMap | None = None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context else -1
        attempt = context.attemptNumber() if context else 0
        queue = self.encoder.target.queue.encode()
        headers = self.encoder.target.headers.encode()
        if self.map_batches is not None:
            batches = self.map_batches(batches)
        push = ProgressPush(self.progress, partition, attempt) if self.progress else None
        sender = PipelinedSender(
            self.broker, window=self.window, ack_timeout=self.ack_timeout, give_up=self.give_up
        )
        try:
            if push is not None:
                sender.on_wait = lambda: push.push(sender.counts)
            for batch in batches:
                encoded = self.encoder.encode(batch)
                queues = encoded.queues or _repeat(queue, len(encoded.msgids))
                sender.send_columns(encoded.msgids, queues, headers, encoded.bodies)
                if push is not None:
                    push.push(sender.counts)
            sender.flush()
            if push is not None:
                push.push(sender.counts, force=True)
        finally:
            sender.close()
            if push is not None:
                push.close()
        counts = sender.counts or {self.encoder.target.queue: QueueCounts()}
        yield _stats_batch(partition, attempt, counts)


def _repeat(value: bytes, times: int) -> list[bytes]:
    return [value] * times


def _stats_batch(partition: int, attempt: int, counts: Mapping[str, QueueCounts]) -> pa.RecordBatch:
    names = sorted(counts)
    n = len(names)
    return pa.RecordBatch.from_pydict(
        {
            "partition": [partition] * n,
            "attempt": [attempt] * n,
            "queue": names,
            "sent": [counts[q].sent for q in names],
            "acked": [counts[q].acked for q in names],
            "rejected": [counts[q].rejected for q in names],
            "resent": [counts[q].resent for q in names],
            "duplicates": [counts[q].duplicates for q in names],
            "reasons": [counts[q].reasons for q in names],
        },
        schema=STATS_SCHEMA,
    )


def jobs_dataframe(
    df: DataFrame,
    job: str | JobLike,
    *,
    broker: str,
    run_id: str,
    queue: str | None = None,
    queue_column: str | None = None,
    key: str | Sequence[str] | None = None,
    kwargs: Mapping[str, str] | Sequence[str] | None = None,
    extra: Mapping[str, Any] | None = None,
    msgid_kwarg: str | None = None,
    headers: Headers | None = None,
    window: int = DEFAULT_WINDOW,
    ack_timeout: float = DEFAULT_ACK_TIMEOUT,
    give_up: float = DEFAULT_GIVE_UP,
    progress: str | None = None,
    map_batches: BatchMap | None = None,
) -> DataFrame:
    """A lazy DataFrame that, when computed, sends ``df``'s rows as jobs.

    It has one row per partition and queue (:data:`STATS_DDL`). Arguments as
    for :func:`enqueue_dataframe`; ``progress`` is the address of a
    :class:`~.progress.ProgressReporter` that tasks push running counts to.
    """
    target = JobTarget.parse(job, queue, headers)
    encoder = RowEncoder.build(
        target,
        run_id,
        df.columns,
        kwargs=kwargs,
        key=key,
        queue_column=queue_column,
        extra=extra,
        msgid_kwarg=msgid_kwarg,
    )
    task = _SendTask(encoder, broker, window, ack_timeout, give_up, progress, map_batches)
    return df.mapInArrow(task, STATS_DDL)


def enqueue_dataframe(
    df: DataFrame,
    job: str | JobLike,
    *,
    broker: str,
    run_id: str,
    queue: str | None = None,
    queue_column: str | None = None,
    key: str | Sequence[str] | None = None,
    kwargs: Mapping[str, str] | Sequence[str] | None = None,
    extra: Mapping[str, Any] | None = None,
    msgid_kwarg: str | None = None,
    headers: Headers | None = None,
    window: int = DEFAULT_WINDOW,
    ack_timeout: float = DEFAULT_ACK_TIMEOUT,
    give_up: float = DEFAULT_GIVE_UP,
    progress: bool | Callable[[Progress], object] = True,
    progress_interval: float = 5.0,
    map_batches: BatchMap | None = None,
) -> EnqueueResult:
    """Send every row of ``df`` as a job and wait until the router answered for each.

    ``job`` is the job's dotted name (``"app.jobs.send_digest"``, so the
    driver and executors need not import Django) or a ``@job`` function.
    Each row's columns become the job's keyword arguments (or the columns
    named by ``kwargs``: a list, or a ``{kwarg: column}`` mapping), plus the
    constant ``extra`` kwargs, plus the job's msgid as ``msgid_kwarg``.

    msgids are ``<run_id>:<key columns>`` (a hash of the kwargs without
    ``key``), so running the same export again, or Spark running a task
    again, sends the same msgids. Every REQUEST asks for ``guarantee``.

    ``progress``: True prints a line every ``progress_interval`` seconds to
    stderr (a bar when it is a terminal), False is silent, a callable gets
    each :class:`~.progress.Progress` instead.

    ``map_batches`` runs on each partition's Arrow batches in the executor
    just before they are sent (last-moment Arrow work without another Python
    stage); the batches it yields must keep the columns the jobs use.
    """
    context = df.sparkSession.sparkContext
    group = f"django-eventmq-{run_id}-{uuid.uuid4().hex[:8]}"
    planned = functools.partial(
        jobs_dataframe,
        df,
        job,
        broker=broker,
        run_id=run_id,
        queue=queue,
        queue_column=queue_column,
        key=key,
        kwargs=kwargs,
        extra=extra,
        msgid_kwarg=msgid_kwarg,
        headers=headers,
        window=window,
        ack_timeout=ack_timeout,
        give_up=give_up,
        map_batches=map_batches,
    )
    planned()  # bad arguments fail here, before anything starts
    reporter = ProgressReporter(context, group, progress, progress_interval)
    previous = context.getLocalProperty("spark.jobGroup.id")
    started = time.monotonic()
    try:
        address = reporter.start() if progress is not False else None
        context.setLocalProperty("spark.jobGroup.id", group)
        context.setLocalProperty("spark.job.description", f"django-eventmq: enqueue run {run_id}")
        rows = planned(progress=address).collect()
    finally:
        reporter.stop()
        context.setLocalProperty("spark.jobGroup.id", previous)  # type: ignore[arg-type]
        context.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]
    result = _result(run_id, [row.asDict() for row in rows], time.monotonic() - started)
    if progress is not False:
        reporter.finished(result.queues, result.seconds)
    return result


def _result(run_id: str, stats: list[dict[str, Any]], seconds: float) -> EnqueueResult:
    queues: dict[str, QueueCounts] = {}
    partitions: dict[int, int] = {}
    for row in stats:
        partitions[row["partition"]] = row["attempt"]
        if not row["sent"] and not row["duplicates"]:
            continue  # an empty partition's placeholder row
        counts = QueueCounts(
            sent=row["sent"],
            acked=row["acked"],
            rejected=row["rejected"],
            resent=row["resent"],
            duplicates=row["duplicates"],
            reasons=list(row["reasons"] or ()),
        )
        queues.setdefault(row["queue"], QueueCounts()).merge(counts)
    return EnqueueResult(
        run_id=run_id,
        queues=queues,
        partitions=len(partitions),
        retried_partitions=sum(1 for attempt in partitions.values() if attempt > 0),
        seconds=seconds,
        stats=stats,
    )
