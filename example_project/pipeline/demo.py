"""``make pipeline``: the example Spark pipeline end to end, from one command.

Migrates the example site's SQLite database, starts ``emq_router`` and
``emq_jobmanager`` (recording every job's outcome in ``JobResult``), writes
the events with ``manage.py generate_events``, runs the PySpark job
(``digest_export``: digests, Parquet export, one ``send_digest`` job per
row on the ``email`` queue), waits until the job manager has run every job
and written its ``JobResult`` row, and prints what the jobs recorded: the
``DigestSent`` rows and the ``JobResult`` rows you also see in the admin. The
router takes free ports when its default ones are taken, as ``make demo``'s does.

Running it again with the same ``--run-id`` sends the same msgids, so the
router starts none of the jobs a second time (the summary says so).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from example_project.demo import ROOT, Service, router_addresses, say, wait_until

LOG_DIR = ROOT / "var" / "pipeline"

SEND_DIGEST = "example_project.digests.jobs.send_digest"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000, help="events to generate (300,000)")
    parser.add_argument("--users", type=int, default=2_000, help="users (2,000)")
    parser.add_argument("--days", type=int, default=7, help="days of events (7)")
    parser.add_argument("--run-id", default="digest-demo", help="names the export and msgids")
    parser.add_argument("--master", default="local[*]", help="Spark master (local[*])")
    parser.add_argument(
        "--data", type=Path, default=ROOT / "var" / "spark", help="events and exports (var/spark)"
    )
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds to wait for the jobs (600)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    spark_dir: Path = options.data
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    (ROOT / "var" / "demo").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="example_project.settings", PYTHONUNBUFFERED="1")
    # The demo site's database: `make demo` (or runserver on it) shows the results too.
    env.setdefault("DATABASE_URL", f"sqlite:///{ROOT / 'var' / 'demo' / 'db.sqlite3'}")
    # Every outcome lands in JobResult, so the digests show as finished jobs in the admin.
    env.setdefault("EMQ_RECORD_ALL_RESULTS", "true")
    # Free router ports when the defaults are taken (another router), as `make demo` does;
    # the Spark job reads EMQ_BROKER_ADDR.
    env.update(router_addresses(env))
    os.environ.update(env)

    say("migrating the SQLite database " + env["DATABASE_URL"])
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True
    )

    import django

    django.setup()
    from django_eventmq.models.results import JobResult, JobStatus
    from example_project.digests.models import DigestSent

    events = spark_dir / f"events-{options.rows}-{options.users}-{options.days}.parquet"
    if events.exists():
        say(f"events already generated: {events}")
    else:
        say(
            f"generating {options.rows:,} events for {options.users:,} users "
            f"over {options.days} days"
        )
        subprocess.run(
            [
                *(sys.executable, "manage.py", "generate_events"),
                *("--rows", str(options.rows), "--users", str(options.users)),
                *("--days", str(options.days), "--out", str(events)),
            ],
            cwd=ROOT,
            env=env,
            check=True,
        )

    services: list[Service] = []
    try:
        say(f"starting emq_router and emq_jobmanager (logs in {LOG_DIR})")
        router = Service("router", ["emq_router"], env, LOG_DIR)
        services.append(router)
        router.wait_for(r"router ready: ")
        jobmanager = Service("jobmanager", ["emq_jobmanager"], env, LOG_DIR)
        services.append(jobmanager)
        jobmanager.wait_for(r"jobmanager connected to ")

        before = DigestSent.objects.filter(run_id=options.run_id).count()
        say(f"running the Spark job on {options.master} (run id {options.run_id})")
        started = time.monotonic()
        pipeline = subprocess.run(
            [
                *(sys.executable, "-m", "example_project.pipeline.digest_export"),
                *("--events", str(events), "--export", str(spark_dir / "exports")),
                *("--run-id", options.run_id, "--master", options.master),
            ],
            cwd=ROOT,
            env=env,
            check=False,
        )
        if pipeline.returncode != 0:
            sys.exit(f"pipeline: the Spark job failed (exit {pipeline.returncode})")
        export = spark_dir / "exports" / options.run_id
        expected = _export_rows(export)
        say(f"the export has {expected:,} digests; waiting for the job manager to run them")

        def counts() -> Counts:
            digests = DigestSent.objects.filter(run_id=options.run_id).count()
            succeeded = JobResult.objects.filter(
                job=SEND_DIGEST, status=JobStatus.SUCCEEDED, msgid__startswith=f"{options.run_id}:"
            ).count()
            return Counts(digests, succeeded)

        # The job manager writes JobResult rows in batches after the jobs wrote their
        # digests: the summary waits for both, not the digests alone.
        recorded = wait_for_jobs(
            counts, expected, _truthy(env["EMQ_RECORD_ALL_RESULTS"]), options.timeout
        )
        seconds = time.monotonic() - started
        digests = DigestSent.objects.filter(run_id=options.run_id)
        say(
            f"done in {seconds:.1f}s: {recorded.digests:,} digests recorded "
            f"({recorded.digests - before:,} new this run), "
            f"{recorded.succeeded:,} send_digest jobs succeeded in JobResult"
        )
        twice = digests.filter(deliveries__gt=1).count()
        print(f"    digests delivered more than once: {twice}")
        for digest in digests.order_by("-events")[:3]:
            print(
                f"    DigestSent: {digest.email} {digest.day} events={digest.events} "
                f"purchases={digest.purchases} revenue={digest.revenue}"
            )
        say(
            "see them in the admin (Digests sent, Job results): "
            f"DATABASE_URL={env['DATABASE_URL']} python manage.py runserver, then /admin/"
        )
        return 0
    finally:
        for service in reversed(services):
            service.stop()


class Counts(NamedTuple):
    """What the jobs of a run recorded: DigestSent rows, succeeded JobResult rows."""

    digests: int
    succeeded: int


def wait_for_jobs(
    counts: Callable[[], Counts], expected: int, results: bool, timeout: float
) -> Counts:
    """Wait until ``expected`` digests are recorded and, with ``results`` (every outcome
    recorded), as many succeeded ``send_digest`` rows are in JobResult; returns the counts,
    or exits saying what is missing after ``timeout`` seconds."""
    last = Counts(0, 0)

    def done() -> bool:
        nonlocal last
        last = counts()
        return last.digests >= expected and (not results or last.succeeded >= expected)

    def missing() -> str:
        said = f"{expected:,} send_digest jobs: {last.digests:,} of {expected:,} digests recorded"
        if results:
            said += f", {last.succeeded:,} of {expected:,} succeeded in JobResult"
        return said

    wait_until(done, missing, timeout, LOG_DIR)
    return last


def _truthy(text: str) -> bool:
    return text.strip().lower() in ("1", "true", "yes", "on")


def _export_rows(path: Path) -> int:
    """Rows in the Parquet export the Spark job wrote (what it asked the router to run)."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(part).metadata.num_rows for part in path.glob("*.parquet"))


if __name__ == "__main__":
    sys.exit(main())
