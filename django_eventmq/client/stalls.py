"""Why a guaranteed bulk send gave up: the errors a :class:`~.bulk.Pipeline` raises
when the router stops taking its jobs.

The pipeline decides *when* (nothing answered for ``give_up`` seconds, a
BATCH left unanswered while others were, jobs not taken while the router
reads); these say *what the operator can do*: a router that is down, full
(above its high-water mark), refusing a BATCH, or not the kind that answers
FEATURES. Pure functions of what the pipeline saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django_eventmq.client.unanswered import SentBatch
from django_eventmq.errors import BrokerUnavailable, RouterFull


def _named(queues: list[str]) -> str:
    return ", ".join(repr(q) for q in queues) or "?"


def batch_unanswered(
    addr: str, batch_msgid: bytes, batch: SentBatch, give_up: float
) -> BrokerUnavailable:
    """A BATCH the router left unanswered for ``give_up`` seconds while it answered others."""
    queues = sorted({q.decode() for q, *_ in batch.jobs.values()})
    return BrokerUnavailable(
        f"the router at {addr} did not acknowledge BATCH "
        f"{batch_msgid.decode()} ({len(batch.jobs)} job(s)) within "
        f"{give_up:g}s though it answered other messages: it refuses it (see "
        "its log), or holds it while its queue "
        f"({', '.join(queues)}) is at its QUEUE_HIGH_WATER_MARK (start a job "
        "manager for it)"
    )


def router_silent(
    addr: str, give_up: float, requests: int, in_batches: int, batches: int
) -> BrokerUnavailable:
    """The router answered nothing for ``give_up`` seconds while jobs waited."""
    detail = f" ({in_batches} of them in {batches} BATCH message(s))" if batches else ""
    return BrokerUnavailable(
        f"the router at {addr} answered nothing for {give_up:g}s; "
        f"{requests + in_batches} REQUEST(s) unacknowledged{detail} (is emq_router running?)"
    )


def router_stalled(addr: str, give_up: float, waiting: int, queues: list[str]) -> BrokerUnavailable:
    """The router reads (answers FEATURES) but took none of ``waiting`` jobs for ``give_up``."""
    return BrokerUnavailable(
        f"the router at {addr} answers but acknowledged none of "
        f"{waiting} job(s) of queue "
        f"{_named(queues)} for {give_up:g}s: it holds them while their queue "
        "is at its QUEUE_HIGH_WATER_MARK (start a job manager for it), or cannot "
        "store them (see its log); send them again later with the same msgids"
    )


def router_full(
    addr: str,
    what: str,
    give_up: float,
    in_flight: int,
    queues: list[str],
    router_features: Mapping[str, Any] | None,
) -> RouterFull:
    """The router is connected (so running) but ``what`` for ``give_up`` seconds: a router
    of ours reads no client only above its high-water mark."""
    mark = (router_features or {}).get("high_water_mark")
    over = f"HIGH_WATER_MARK ({mark:,} jobs)" if isinstance(mark, int) else "HIGH_WATER_MARK"
    return RouterFull(
        f"the router at {addr} is full: it is running (connected) but {what} for "
        f"{give_up:g}s while {in_flight:,} job(s) of queue {_named(queues)} waited: "
        f"more jobs wait there than its {over}, so it reads no client until below 90% "
        'of it (its MONITOR says "blocked": true; with "journal_failure" set, it is '
        "not full but cannot write its journal: see its log; if MONITOR does not answer "
        "either, it is still opening its journal after a start, its sockets bound first, "
        "or it is stuck). "
        "Start a job manager for that queue "
        f"(emq_jobmanager --queues {','.join(queues) or 'QUEUE'}), raise "
        "HIGH_WATER_MARK, or wait and send the same jobs again (Spark: the same run_id): "
        "those the router holds already are not stored twice"
        + (
            ""
            if router_features is not None
            # Ours answers FEATURES whenever it reads; the reference never.
            else ". It never answered our FEATURES: if it is the reference eventmq "
            "router, which answers only a job it hands to a worker at once, no worker "
            "was free: start more job managers"
        )
    )
