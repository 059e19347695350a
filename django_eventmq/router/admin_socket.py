"""The JSON the router's admin socket answers with (STATUS, ROUTER_SHOW_*, MONITOR).

Key names and shapes match the reference router so its tools can read ours;
keys it does not have are extras. Times are milliseconds, as the reference's.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol.features import TROUBLE
from django_eventmq.protocol.frame_fields import stored_request
from django_eventmq.protocol.payload import parse_job
from django_eventmq.router.book import Book
from django_eventmq.router.routing import Routing, Schedulers
from django_eventmq.router.waiting import RoutedJob
from django_eventmq.runtime.outbox import show


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def status(routing: Routing, now: float) -> dict[str, Any]:
    """STATUS: in-flight, waiting and processed counts by queue (and worker)."""
    inflight: Counter[str] = Counter()
    total_age: Counter[str] = Counter()
    max_age: dict[str, int] = {}
    for job in routing.inflight.values():
        age = _ms(now - job.accepted_at)
        inflight[job.queue] += 1
        total_age[job.queue] += age
        max_age[job.queue] = max(age, max_age.get(job.queue, 0))
    return {
        "inflight_messages_by_queue": dict(inflight),
        # Like the reference: mean and max age (ms since accepted) of in-flight jobs.
        "latency_messages_by_queue": {q: total_age[q] // n for q, n in inflight.items()},
        "max_latency_messages_by_queue": max_age,
        "waiting_messages_by_queue": {q: len(jobs) for q, jobs in routing.waiting.items()},
        "processed_messages_by_queue": dict(routing.processed_by_queue),
        "processed_messages_by_worker": {
            show(i): n for i, n in routing.processed_by_worker.items()
        },
        # Extras of ours.
        # Age of the oldest waiting job in memory (a queue longer than its
        # window has older ones on disk only).
        "waiting_since_by_queue": {
            q: _ms(now - oldest)
            for q, jobs in routing.waiting.items()
            if (oldest := jobs.oldest()) is not None
        },
        # Jobs waiting on queues no connected job manager serves (they wait for one).
        "unserved_queues": routing.unserved(),
        "requeued_messages": routing.requeued,
        # Rate limits (docs/rate-limits.md): per queue with a limit or jobs held back by
        # one (limit, hand-outs in its current period, held back now), and per rate key.
        "rate_limits_by_queue": _rate_limits(routing),
        "rate_limits_by_key": routing.waiting.limits.keys_status(),
    }


def _rate_limits(routing: Routing) -> dict[str, dict[str, Any]]:
    return routing.waiting.limits.status({q: w.count for q, w in routing.waiting.items()})


def show_workers(routing: Routing) -> dict[str, Any]:
    """ROUTER_SHOW_WORKERS: each worker's queues and free slots, and each queue's workers."""
    return {
        "connected_workers": {
            show(w.identity): {
                "hb": w.last_heard,
                "available_slots": w.slots,
                "queues": [[weight, name] for weight, name in w.queues],
                "inflight": len(w.inflight),
                "stopping": w.stopping,
                # Why it takes no jobs now, as its FEATURES said ("": it takes them).
                "trouble": str(w.session.announced.get(TROUBLE) or ""),
            }
            for w in routing.workers.values()
        },
        "connected_queues": {
            queue: [[weight, show(i)] for weight, i in routing.queue_members(queue)]
            for queue in routing.queue_names()
        },
    }


#: Most rows ROUTER_SHOW_JOBS answers with (the oldest): each costs a parse of the
#: job's body in the router's loop, and a page or a terminal shows no more.
SHOW_JOBS_LIMIT = 500


def show_jobs(routing: Routing, now: float, limit: int = SHOW_JOBS_LIMIT) -> dict[str, Any]:
    """ROUTER_SHOW_JOBS: the jobs handed out (the ``limit`` oldest; ``total``: all), with
    their job manager and, when the job manager reports what runs (RUNNING), whether
    each runs and in which process."""
    rows: list[tuple[float, str, RoutedJob, bytes, str, int | None]] = []
    for worker in routing.workers.values():
        running = worker.running
        for job in worker.inflight:
            started = None if running is None else running.get(job.msgid)
            if started is not None:
                pid, since = started
                rows.append((since, job.msgid, job, worker.identity, "running", pid))
            else:
                state = "handed_out" if running is None else "prefetched"
                rows.append((job.dispatched_at, job.msgid, job, worker.identity, state, None))
    rows.sort(key=lambda row: (row[0], row[1]))
    return {
        "jobs": [
            {
                "msgid": msgid,
                "job": job_name(job),
                "queue": job.queue,
                "jobmanager": show(identity),
                "state": state,
                "pid": pid,
                # Seconds running (or, not running, since it was handed out).
                "age": round(max(0.0, now - since), 3),
                "handed_out": round(max(0.0, now - job.dispatched_at), 3),
            }
            for since, msgid, job, identity, state, pid in rows[:limit]
        ],
        "total": len(rows),
    }


def job_name(job: RoutedJob) -> str:
    """The dotted name of a handed-out job, from its stored body ('?' if unreadable)."""
    try:
        body = parse_job(stored_request(job.frames).body)
    except (ProtocolError, ValueError):
        return "?"
    return f"{body.path}.{body.callable}"


def show_schedulers(schedulers: Schedulers) -> dict[str, Any]:
    """ROUTER_SHOW_SCHEDULERS: connected schedulers and when we last heard them."""
    return {
        "connected_schedulers": {
            show(s.identity): {"hb": s.last_heard} for s in schedulers.peers.values()
        },
        # Kept in the journal until a scheduler takes them (the reference's name).
        "buffered_schedule_messages": schedulers.stored,
    }


def monitor(book: Book) -> dict[str, Any]:
    """MONITOR: the journal's state and the book's counters, like PZQ's monitor."""
    routing = book.routing
    queues: dict[str, dict[str, int]] = {}

    def entry(queue: str) -> dict[str, int]:
        return queues.setdefault(
            queue, {"queued": 0, "in_flight": 0, "delayed": 0, "poisoned": 0, "expired": 0}
        )

    for queue, wait_queue in routing.waiting.items():
        entry(queue)["queued"] = wait_queue.count
    for job in routing.inflight.values():
        entry(job.queue)["in_flight"] += 1
    for queue, n in book.delays.delayed.items():
        if n:
            entry(queue)["delayed"] = n
    for queue, n in book.poisoned.by_queue.items():
        if n:
            entry(queue)["poisoned"] = n
    for queue, n in book.outcomes.expired_by_queue.items():
        entry(queue)["expired"] = n
    # Jobs not started before their ``expires`` time ("expired" above is leases);
    # only in the queues that had any.
    for queue, n in book.expired_jobs.by_queue.items():
        if n:
            entry(queue)["jobs_expired"] = n
    # Unique jobs refused because another job held their key (only queues that had any).
    for queue, n in book.unique.refused.items():
        entry(queue)["unique_refused"] = n
    # Jobs held back by a rate limit now (only queues with a limit or such jobs).
    limited = _rate_limits(routing)
    for queue, limit in limited.items():
        entry(queue)["rate_limited"] = limit["held_back"]
    return {
        "queued": routing.waiting.total(),
        "in_memory": routing.waiting.memory(),
        "parcels": book.journal.parcel_count(),
        "in_flight": len(routing.inflight),
        "delayed": sum(book.delays.delayed.values()),
        "poisoned": sum(book.poisoned.by_queue.values()),
        "store_bytes": book.journal.size_bytes(),
        "syncs": book.journal.syncs,
        "expired": book.outcomes.expired,
        "jobs_expired": sum(book.expired_jobs.by_queue.values()),
        "rate_limited": sum(limit["held_back"] for limit in limited.values()),
        "requeued": routing.requeued,
        "recovered": book.recovered,
        # Waiting jobs a reconnecting job manager said it still holds (after a failover).
        "adopted": book.reports.adopted,
        "duplicates": book.duplicates,
        "rejected": book.rejected,
        # Unique keys taken now, and jobs refused as not unique (counted in rejected too).
        "unique_keys": len(book.unique),
        "unique_refused": sum(book.unique.refused.values()),
        "finished_remembered": len(book.finished),
        "schedules_kept": book.journal.schedule_count(),
        "journal": book.journal.path,
        "per_queue": queues,
    }


def poisoned(book: Book, limit: int = 100) -> list[dict[str, Any]]:
    """STATUS ``poisoned_messages``: jobs set aside, oldest first. The book counts
    them (from the journal at start, then as it sets jobs aside and takes them
    back): with none counted the journal is not asked (its read would write
    the kept changes first, at every STATUS)."""
    if not any(n > 0 for n in book.poisoned.by_queue.values()):
        return []
    return [
        {
            "msgid": row.msgid,
            "queue": row.queue,
            "job": row.body.decode(errors="replace"),
            "headers": row.headers.decode(errors="replace"),
            "accepted": row.accepted,
            "deaths": row.deaths,
            "reason": reason,
        }
        for row, reason in book.journal.poisoned(limit)
    ]
