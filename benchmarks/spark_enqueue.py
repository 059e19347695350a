"""Rows of a Spark DataFrame to jobs accepted (ACKed) by the router, from local[2].

    python benchmarks/spark_enqueue.py                       # 1,000,000 rows, our router
    python benchmarks/spark_enqueue.py --rows 200000 --sink  # against a bare ACK sink
    python benchmarks/spark_enqueue.py --journal-sync normal --json out.json

The router runs with no job manager, so it holds every job: the figure is
how fast the router *accepts* jobs (stores them and answers ACK), which is
what a Spark export waits for. ``--sink`` replaces the router by a minimal
ROUTER socket that ACKs each REQUEST and stores nothing: the ceiling of the
Spark side (encoding, sending, reading ACKs) on this machine.

The DataFrame (user_id, email, day, events, revenue decimal(12,2)) is
computed and cached first, and a small warm-up run starts Spark's Python
workers, so neither is counted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._peers import PYTHON, ROOT, Proc

#: The issue's target.
TARGET = 100_000


def sink_main() -> None:
    """A ROUTER that ACKs every REQUEST and BATCH and keeps nothing (the ``--sink`` peer).

    It answers FEATURES as our router does, so the sender batches: the figure
    is the Spark side's ceiling with BATCH (Arrow batches, encoding, packing,
    reading the ACKs), no storing.
    """
    import json

    import zmq

    from django_eventmq.protocol.batch import MAX_BATCH_JOBS
    from django_eventmq.protocol.limits import MAX_MESSAGE_BYTES

    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    print(f"sink ready: tcp://127.0.0.1:{port}", flush=True)
    features = json.dumps(
        {"batch": 1, "batch_jobs": MAX_BATCH_JOBS, "batch_bytes": MAX_MESSAGE_BYTES}
    ).encode()
    while True:
        # identity, '', version, COMMAND, msgid, ...
        frames = sock.recv_multipart()
        if len(frames) < 5:
            continue
        identity, command, msgid = frames[0], frames[3], frames[4]
        if command == b"FEATURES":
            sock.send_multipart([identity, b"", b"eMQP/1.0", b"FEATURES", b"sink", features])
        elif command in (b"REQUEST", b"BATCH"):
            sock.send_multipart([identity, b"", b"eMQP/1.0", b"ACK", b"sink", msgid])


def start_peer(args: argparse.Namespace, workdir: Path) -> tuple[Proc, str]:
    if args.sink:
        proc = Proc([PYTHON, str(Path(__file__).resolve()), "sink"])
        return proc, proc.wait_output(r"sink ready: (\S+)").group(1)
    any_port = "tcp://127.0.0.1:*"
    addresses = ["--frontend", any_port, "--backend", any_port, "--admin", any_port]
    proc = Proc(
        [PYTHON, "-m", "django_eventmq", "router", *addresses],
        env={
            "EMQ_JOURNAL_PATH": str(workdir / "journal.sqlite3"),
            "EMQ_JOURNAL_SYNC": args.journal_sync,
            "EMQ_HIGH_WATER_MARK": str(args.rows * 2 + 100_000),
        },
    )
    return proc, proc.wait_output(r"router ready: frontend=(\S+)").group(1)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from django_eventmq.contrib.spark import enqueue_dataframe, local_session

    spark = local_session("spark-enqueue-bench", args.master, python_path=[ROOT])
    workdir = Path(tempfile.mkdtemp(prefix="emq-spark-bench-"))
    peer, broker = start_peer(args, workdir)
    try:
        df = (
            spark.range(0, args.rows, 1, args.partitions)
            .select(
                F.col("id").alias("user_id"),
                F.concat(F.lit("user"), F.col("id"), F.lit("@example.com")).alias("email"),
                F.lit("2024-05-01").cast("date").alias("day"),
                (F.col("id") % 17).cast("int").alias("events"),
                (F.col("id") / 7).cast("decimal(12,2)").alias("revenue"),
            )
            .cache()
        )
        df.count()

        def run(frame: Any, run_id: str) -> Any:
            return enqueue_dataframe(
                frame,
                "app.jobs.send_digest",
                queue="email",
                broker=broker,
                run_id=run_id,
                key=["user_id", "day"],
                msgid_kwarg="job_id",
                window=args.window,
                progress=not args.quiet,
                progress_interval=5.0,
            )

        # Start the Python workers and load the code (not counted).
        run(df.where(F.col("user_id") < 2_000), "warmup")
        started = time.perf_counter()
        result = run(df, "bench")
        seconds = time.perf_counter() - started
    finally:
        peer.stop()
        spark.stop()
    email = result.queues.get("email")
    return {
        "rows": args.rows,
        "peer": "sink" if args.sink else f"our router (journal sync {args.journal_sync})",
        "master": args.master,
        "partitions": result.partitions,
        "window": args.window,
        "seconds": round(seconds, 2),
        "accepted_per_s": round(result.acked / seconds),
        "sent": result.sent,
        "acked": result.acked,
        "rejected": result.rejected,
        "resent": email.resent if email else 0,
        "machine": f"{os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}",
    }


def main() -> int:
    if sys.argv[1:2] == ["sink"]:
        sink_main()
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--partitions", type=int, default=8, help="DataFrame partitions (8)")
    parser.add_argument("--window", type=int, default=10_000, help="REQUESTs in flight per task")
    parser.add_argument("--sink", action="store_true", help="a bare ACK sink, not our router")
    parser.add_argument("--journal-sync", choices=["full", "normal"], default="full")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    figures = measure(args)
    width = max(len(k) for k in figures)
    for key, value in figures.items():
        shown = f"{value:,}" if isinstance(value, int) else value
        print(f"{key:<{width}}  {shown}")
    verdict = "MET" if figures["accepted_per_s"] >= TARGET else "NOT MET"
    print(f"target >= {TARGET:,} jobs/s accepted: {verdict} ({figures['accepted_per_s']:,})")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    ok = figures["acked"] + figures["rejected"] == figures["sent"] == args.rows
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
