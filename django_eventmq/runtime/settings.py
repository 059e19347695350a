"""Runtime settings as one frozen dataclass, with validation that says how to fix.

Built from (lowest to highest precedence) the defaults, a mapping such as
Django's ``settings.EVENTMQ``, and ``EMQ_*`` environment variables. Command
line options are applied on top by the commands with :meth:`Settings.replace`.
This module never imports Django: the router and Spark executors use it bare.
How each value is parsed and checked is in :mod:`.setting_values`.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from django_eventmq.errors import ConfigurationError
from django_eventmq.protocol import constants as C
from django_eventmq.runtime.addresses import check_shard_by
from django_eventmq.runtime.setting_values import (
    _QUEUE_NAME,
    JOURNAL_URL_SCHEMES,
    QueueList,
    Routes,
    _check_group,
    _check_security,
    _check_status_admin_addrs,
    _coerce,
    _positive,
    check_address,
    check_expires,
    check_peer_addresses,
    parse_autoscale,
    parse_queues,
    parse_rate_limits,
    parse_routes,
)

# The parsers and checks moved to setting_values.py; importers of them here keep working.
__all__ = [
    "ENV_PREFIX",
    "JOURNAL_URL_SCHEMES",
    "KNOWN_KEYS",
    "QueueList",
    "Settings",
    "check_address",
    "check_peer_addresses",
    "from_mapping",
    "parse_autoscale",
    "parse_queues",
    "parse_rate_limits",
    "unknown_settings_message",
]


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Every runtime setting. Field names are the ``EVENTMQ`` keys, lower-cased."""

    #: Address the client and scheduler connect to (router frontend); empty
    #: means no broker, and ``.delay()`` runs jobs inline like ``EAGER``.
    broker_addr: str = C.DEFAULT_FRONTEND_ADDR
    #: Address a job manager connects to (router backend).
    worker_addr: str = C.DEFAULT_BACKEND_ADDR
    #: Address the router binds for clients and schedulers.
    frontend_addr: str = C.DEFAULT_FRONTEND_ADDR
    #: Address the router binds for job managers.
    backend_addr: str = C.DEFAULT_BACKEND_ADDR
    #: Address the router binds for administrative commands.
    admin_addr: str = C.DEFAULT_ADMIN_ADDR
    #: Admin tools (``emq_status``, the admin dashboard): the routers they read when
    #: ``--admin`` does not say, by their admin addresses: ``","`` between the members of
    #: a router group, ``";"`` between groups (shards), e.g.
    #: ``"tcp://a:47293,tcp://b:47293;tcp://c:47293"``. Empty: ``admin_addr``, one
    #: router (which stays one address: it is what a router binds).
    status_admin_addrs: str = ""
    #: Clients with several router groups in ``BROKER_ADDR`` (``";"`` between them):
    #: ``"queue"`` sends every job of a queue to one group (its order kept; a group that
    #: is down is skipped), ``"round_robin"`` sends to the groups in turn.
    shard_by: str = "queue"
    #: Queues a job manager serves, ``((weight, name), ...)``; higher weight first.
    queues: QueueList = ((C.DEFAULT_QUEUE_WEIGHT, C.DEFAULT_QUEUE_NAME),)
    #: Worker processes per job manager.
    concurrency: int = 4
    #: Grow and shrink the worker processes between two bounds, ``"MIN,MAX"``
    #: (e.g. ``"2,8"``): more while every process is busy and the router fills
    #: every slot offered, fewer once processes idled ``autoscale_idle`` seconds.
    #: Replaces ``concurrency`` when set; empty: a fixed ``concurrency``.
    autoscale: str = ""
    #: Seconds a worker process idles before an autoscaling job manager stops it.
    autoscale_idle: float = 30.0
    #: Most jobs handed to a job manager beyond its free processes (READY
    #: slots), so each worker process has its next jobs at hand instead of
    #: idling for a round trip to the router. How many it takes below this cap
    #: follows ``prefetch_budget``, so the cap only binds for jobs shorter than
    #: about 0.1 ms. 0: never any, for strict priority order (prefetched jobs
    #: are already that job manager's; see docs/concepts.md).
    prefetch: int = 1024
    #: Seconds of queued work per worker process a job manager keeps beyond the
    #: job each runs: its prefetch is ``prefetch_budget * concurrency / mean job
    #: run time`` (at most ``prefetch``), deep for short jobs, none for long ones.
    #: 0: always ``prefetch`` (fixed).
    prefetch_budget: float = 0.05
    #: A worker process is replaced after running this many jobs (0: never).
    max_jobs_per_child: int = 0
    #: ``async def`` jobs one worker process runs at once on its event loop (1: one
    #: job at a time, as plain jobs). 100 by default: an async job mostly waits
    #: (network, sleeps), and a hundred waiting coroutines cost a few MB and little
    #: CPU, while more would make one process's jobs wait on each other's CPU
    #: slices and hold more jobs away from other job managers.
    async_concurrency: int = 100
    #: Seconds between heartbeats, and of silence after which a peer is dead (eMQP
    #: HEARTBEATs of job managers and schedulers; ZMTP heartbeats on clients' sockets).
    heartbeat_interval: float = C.HEARTBEAT_INTERVAL
    heartbeat_timeout: float = C.HEARTBEAT_TIMEOUT
    #: Seconds a stopping job manager lets running jobs finish.
    shutdown_grace: float = 30.0
    #: Upper bound of the reconnect back-off, in seconds.
    reconnect_max_delay: float = 10.0
    #: Run jobs inline in ``.delay()`` instead of sending them (tests).
    eager: bool = False
    #: Modules imported by a job manager at start-up so their ``@job``\\s register.
    job_modules: tuple[str, ...] = ()
    #: Modules whose callables may run without ``@job`` (trusted code only).
    allowed_job_modules: tuple[str, ...] = ()
    #: Seconds ``.delay()`` waits to hand a message to the socket.
    send_timeout: float = 5.0
    #: What a scheduler does with runs that fell due while none ran:
    #: ``once`` (fire one), ``skip`` (fire none) or ``all`` (fire each).
    scheduler_catchup: str = "once"
    #: Seconds between a scheduler's reloads of changed schedules.
    scheduler_poll_interval: float = 1.0
    #: Seconds late before a run counts as missed (and the catch-up policy applies).
    scheduler_misfire_grace: float = 60.0
    #: Seconds run claims are kept (they stop two schedulers firing a run twice).
    scheduler_run_retention: float = 604800.0
    #: Write every ``.delay_on_commit()`` job to the outbox table in the caller's
    #: transaction first, so a process killed between the commit and the send loses
    #: none (``@job(outbox=...)`` decides per job); see docs/durability.md.
    outbox: bool = False
    #: Seconds an outbox row waits for its own process's send before a scheduler
    #: (``emq_scheduler``, the relay) sends it.
    outbox_relay_after: float = 5.0
    #: Router: keep every accepted job in an on-disk journal until it finished, so a
    #: router restart or crash loses none (False: the same store, kept in memory).
    journal: bool = True
    #: Router: the journal file (SQLite, no server). ``{frontend}`` becomes the bound
    #: frontend address (``127.0.0.1-47291``), so two routers on one host never share one.
    journal_path: str = "var/eventmq-journal-{frontend}.sqlite3"
    #: Router: ``full`` acknowledges a job once it is on stable storage (fsync; survives
    #: a power cut), ``normal`` once the OS has it (survives a router crash, not a power cut).
    journal_sync: str = "full"
    #: Router: seconds a journal write waits for a lock another connection holds (an
    #: sqlite3 shell, a backup) before the router stops acknowledging new jobs and
    #: retries each second; at most 1, so heartbeats keep flowing.
    journal_busy_timeout: float = 0.1
    #: Router group: its shared journal on PostgreSQL, a libpq URL such as
    #: ``postgresql://eventmq@db.example:5432/eventmq`` (under ``manage.py`` also the
    #: name of a PostgreSQL entry of ``DATABASES``). Set, the router is one member of
    #: ``group``: every member points at the same URL and exactly one serves (the
    #: leader); the others stand by. Empty: the SQLite journal at ``journal_path``.
    journal_url: str = ""
    #: Router group: its name (``[a-z0-9_]``, at most 40); its journal is the schema
    #: ``emq_<group>``, so several groups can share one database.
    group: str = "default"
    #: Router group: seconds the leader's lease lasts without a renewal. A stopped or
    #: cut-off leader is replaced about this long after its last renewal; it renews at
    #: least every third of it. Longer than ``heartbeat_interval``.
    lease_seconds: float = 5.0
    #: Router: waiting jobs per queue kept in memory; the others wait on disk only.
    queue_window: int = 1000
    #: Router: waiting + delayed jobs (all queues) at which new REQUESTs are held back.
    high_water_mark: int = 1_000_000
    #: Router, above the high-water mark: ``block`` (stop reading clients, whose sends
    #: then wait in ZeroMQ: nothing is lost) or ``reject`` (answer REJECT with a reason).
    hwm_policy: str = "block"
    #: Router, policy ``block``: waiting + delayed jobs in one queue at which new jobs
    #: for that queue are held unacknowledged (0: no per-queue mark); see docs/durability.md.
    queue_high_water_mark: int = 0
    #: Router: at most N jobs of a queue handed out per period, across all job
    #: managers: ``{"email": "100/m"}`` (units s, m, h, d; ``"10/5s"``: 10 per 5 s);
    #: from ``EMQ_RATE_LIMITS``: ``"email=100/m,sms=5/s"``. See docs/rate-limits.md.
    rate_limits: tuple[tuple[str, str], ...] = ()
    #: Router: bytes of messages (ACKs, replies, REJECTs) it keeps queued for all the
    #: clients that read slower than it sends; past it the heaviest are cut off.
    outbox_budget: int = 64 * 1024 * 1024
    #: Router: the same bound for one client.
    outbox_peer_bytes: int = 16 * 1024 * 1024
    #: Router: a job whose worker died this many times while running it is set aside
    #: as poisoned (listed by STATUS and MONITOR) instead of being handed out again.
    poison_after: int = 3
    #: Router: seconds a job without a ``timeout`` header may stay handed out before it
    #: is handed out again (0: no limit; a silent or departed job manager still counts).
    job_lease: float = 0.0
    #: Router: seconds added to a job's ``timeout`` header (and to a departing job
    #: manager's jobs) before its lease runs out.
    lease_grace: float = 30.0
    #: Router: first delay, in seconds, before a job that asked to be retried runs
    #: again; it doubles per attempt up to ``retry_backoff_cap``.
    retry_backoff_base: float = 1.0
    retry_backoff_cap: float = 300.0
    #: Router: msgids of finished jobs remembered so a resent REQUEST does not run twice
    #: (kept in the journal, so across restarts too; 0: none).
    dedup_memory: int = 100_000
    #: Router: seconds a finished job's msgid is remembered (at most ``dedup_memory`` of
    #: them; 0: none).
    dedup_window: float = 3600.0
    #: Seconds a ``guarantee`` job's ``.delay()`` waits for the router's ACK
    #: before sending the job again (with the same msgid).
    ack_timeout: float = 2.0
    #: Times ``.delay()`` resends an unacknowledged ``guarantee`` job before
    #: raising ``BrokerUnavailable``.
    ack_retries: int = 3
    #: Days job results are kept; ``emq_purge_results`` deletes older ones.
    results_retention_days: float = 7.0
    #: Seconds a finished job result (and a finished workflow) is kept after it was
    #: last written; the scheduler (``emq_scheduler``) deletes older ones by itself,
    #: in batches. 0 or None: results never expire (``emq_purge_results`` only).
    result_expires: float = 86400.0
    #: Publisher: address it binds for PUBLISH messages (``emq_pubsub``).
    publisher_incoming_addr: str = C.DEFAULT_PUBLISHER_INCOMING_ADDR
    #: Publisher: address it binds for subscribers (a PUB socket).
    publisher_outgoing_addr: str = C.DEFAULT_PUBLISHER_OUTGOING_ADDR
    #: Address ``publish()`` connects to (the publisher's incoming side); empty
    #: means no publisher, and ``publish()`` runs this process's ``@subscriber``
    #: handlers inline (so does ``EAGER``).
    publish_addr: str = C.DEFAULT_PUBLISHER_INCOMING_ADDR
    #: Address a subscriber (``emq_subscribe``) connects to (the publisher's outgoing side).
    subscribe_addr: str = C.DEFAULT_PUBLISHER_OUTGOING_ADDR
    # -- security (docs/security.md) ------------------------------------------------
    #: Router and publisher: their CURVE secret key, as a Z85 string (40 characters) or
    #: the path of a key file made by ``emq_keys``. Set it and their sockets encrypt and
    #: accept only the public keys listed below. From a file or ``EMQ_*``, never the repo.
    curve_server_secret_key: str = ""
    #: The server's public key (Z85 or a key file). Set in a client, job manager or
    #: scheduler, it makes them speak CURVE to that server; derived from the secret if empty.
    curve_server_public_key: str = ""
    #: This process's own CURVE secret key (Z85 or a key file), used when it connects.
    curve_client_secret_key: str = ""
    #: This process's own public key (Z85 or a key file); derived from the secret if empty.
    curve_client_public_key: str = ""
    #: Admin tools (``emq_status``, the admin dashboard, the router's metrics): their own
    #: CURVE secret key (Z85 or a key file) for the router's admin socket, whose public key
    #: must be in the router's ``curve_admin_clients``. Empty: ``curve_client_secret_key``,
    #: else (on the router's host) ``curve_server_secret_key``.
    curve_admin_secret_key: str = ""
    #: Router frontend: public keys of the clients and schedulers it accepts (Z85 keys,
    #: key files or directories of ``*.key`` files; comma separated in ``EMQ_*``).
    curve_frontend_clients: tuple[str, ...] = ()
    #: Router backend: public keys of the job managers it accepts.
    curve_backend_workers: tuple[str, ...] = ()
    #: Router admin socket: public keys of the admin tools it accepts.
    curve_admin_clients: tuple[str, ...] = ()
    #: Publisher: public keys of the publishers and subscribers it accepts
    #: (empty: the ``curve_frontend_clients``).
    curve_publisher_clients: tuple[str, ...] = ()
    #: Router with CURVE on: who may CANCEL a job: ``owner`` (the key that sent it, or
    #: an admin key from ``curve_admin_clients``) or ``any`` (every client key).
    cancel_policy: str = "owner"
    #: Router: accept admin connections from loopback and ``ipc://`` only.
    admin_local_only: bool = True
    #: Router without CURVE: the file it writes its admin token to at start (mode 0600),
    #: which DISCONNECT, POISONED_RETRY and POISONED_PURGE must carry; admin tools read
    #: it. ``{admin}`` stands for the admin port (``tcp-47293``; an ``ipc://`` path made
    #: a name). Empty: ``admin-{admin}.token`` in ``$XDG_RUNTIME_DIR/django-eventmq``,
    #: else in ``<temp dir>/django-eventmq-<uid>`` (a directory only this user may use).
    admin_token_file: str = ""
    #: Router without CURVE: False lets DISCONNECT and POISONED_* in without the admin
    #: token (from any local process), as the reference eventmq 0.3.13's admin tools send
    #: them. With CURVE on, the admin key is the proof and no token is asked.
    admin_token_required: bool = True
    #: Every socket: bytes in one frame; a peer sending a bigger one is disconnected.
    max_message_bytes: int = 64 * 1024 * 1024
    #: Every socket: frames in one message; longer messages are drained and refused.
    max_frames: int = 32
    #: Router and job manager: bytes of a job body; bigger ones are refused (REJECT).
    max_body_bytes: int = 16 * 1024 * 1024
    #: Job manager: nesting depth of a job body's JSON.
    max_json_depth: int = 64
    #: Router: highest ``retry-count`` header accepted.
    max_retry_count: int = 100
    #: Router: highest ``timeout`` header accepted, in seconds (7 days).
    max_timeout: int = 604800
    #: Clients: the queue of a job whose ``@job`` names none, by its dotted name
    #: (``module.function``): ``{"billing.jobs.*": "billing", "app.jobs.send_*": "email"}``,
    #: globs tried in order, the first match wins; none matches: ``default``.
    #: ``.send(queue=)`` wins over both. From ``EMQ_ROUTES``: the same as JSON.
    routes: Routes = ()
    #: Job manager: per queue, the jobs that may run on it, e.g.
    #: ``{"email": ["app.jobs.send", "app.mail.*"]}`` (``"*"`` for queues not
    #: named). Jobs must be registered as well.
    queue_allowed_jobs: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: Job manager: record the outcome of every job through the hooks module's
    #: ``record_results`` (False: only jobs that asked for a reply).
    record_all_results: bool = False

    def __post_init__(self) -> None:
        for name in ("frontend_addr", "backend_addr", "admin_addr"):
            check_address(name, getattr(self, name))
        _check_status_admin_addrs(self.status_admin_addrs)
        check_shard_by(self.shard_by)
        # Peers may name every member of a router group: "tcp://a:47290,tcp://b:47290".
        check_peer_addresses("worker_addr", self.worker_addr)
        if self.broker_addr:  # empty means "no broker": jobs run inline
            check_peer_addresses("broker_addr", self.broker_addr)
        if not self.queues:
            raise ConfigurationError("QUEUES is empty: name at least one queue, e.g. 'default:10'")
        for _weight, name in self.queues:
            if not _QUEUE_NAME.match(name):
                raise ConfigurationError(
                    f"QUEUES: queue name {name!r} may only hold letters, digits, '_', '.' and '-'"
                )
        _positive("concurrency", self.concurrency, whole=True)
        parse_autoscale(self.autoscale)
        _positive("autoscale_idle", self.autoscale_idle)
        _positive("heartbeat_interval", self.heartbeat_interval)
        _positive("heartbeat_timeout", self.heartbeat_timeout)
        _positive("shutdown_grace", self.shutdown_grace, allow_zero=True)
        _positive("reconnect_max_delay", self.reconnect_max_delay)
        _positive("send_timeout", self.send_timeout)
        _positive("prefetch", self.prefetch, whole=True, allow_zero=True)
        _positive("prefetch_budget", self.prefetch_budget, allow_zero=True)
        _positive("max_jobs_per_child", self.max_jobs_per_child, whole=True, allow_zero=True)
        _positive("async_concurrency", self.async_concurrency, whole=True)
        if self.scheduler_catchup not in ("once", "skip", "all"):
            raise ConfigurationError(
                "SCHEDULER_CATCHUP: expected 'once', 'skip' or 'all', "
                f"got {self.scheduler_catchup!r}"
            )
        _positive("scheduler_poll_interval", self.scheduler_poll_interval)
        _positive("scheduler_misfire_grace", self.scheduler_misfire_grace, allow_zero=True)
        _positive("scheduler_run_retention", self.scheduler_run_retention)
        _positive("outbox_relay_after", self.outbox_relay_after, allow_zero=True)
        if not self.journal_path:
            raise ConfigurationError("JOURNAL_PATH is empty: name the router's journal file")
        _positive("journal_busy_timeout", self.journal_busy_timeout, allow_zero=True)
        if self.journal_busy_timeout > 1:
            raise ConfigurationError(
                f"JOURNAL_BUSY_TIMEOUT: at most 1 (seconds), got {self.journal_busy_timeout}: "
                "the router's loop must not wait for seconds"
            )
        _check_group(self)
        if self.journal_sync not in ("full", "normal"):
            raise ConfigurationError(
                f"JOURNAL_SYNC: expected 'full' or 'normal', got {self.journal_sync!r}"
            )
        if self.hwm_policy not in ("block", "reject"):
            raise ConfigurationError(
                f"HWM_POLICY: expected 'block' or 'reject', got {self.hwm_policy!r}"
            )
        _positive("queue_window", self.queue_window, whole=True)
        _positive("high_water_mark", self.high_water_mark, whole=True)
        _positive("queue_high_water_mark", self.queue_high_water_mark, whole=True, allow_zero=True)
        if self.queue_high_water_mark >= self.high_water_mark:
            # A queue reaching it would put the whole router at its global mark first.
            raise ConfigurationError(
                f"QUEUE_HIGH_WATER_MARK: {self.queue_high_water_mark} is not below "
                f"HIGH_WATER_MARK ({self.high_water_mark}), so it would never act; set it "
                "well below (a tenth, say) or 0 to turn it off"
            )
        _positive("outbox_budget", self.outbox_budget, whole=True)
        _positive("outbox_peer_bytes", self.outbox_peer_bytes, whole=True)
        _positive("poison_after", self.poison_after, whole=True)
        _positive("job_lease", self.job_lease, allow_zero=True)
        _positive("lease_grace", self.lease_grace, allow_zero=True)
        _positive("retry_backoff_base", self.retry_backoff_base)
        _positive("retry_backoff_cap", self.retry_backoff_cap)
        _positive("dedup_memory", self.dedup_memory, whole=True, allow_zero=True)
        _positive("dedup_window", self.dedup_window, allow_zero=True)
        if self.heartbeat_timeout <= self.heartbeat_interval:
            raise ConfigurationError(
                "HEARTBEAT_TIMEOUT must be longer than HEARTBEAT_INTERVAL, or live peers "
                f"look dead (got {self.heartbeat_timeout} <= {self.heartbeat_interval})"
            )
        _positive("ack_timeout", self.ack_timeout)
        _positive("ack_retries", self.ack_retries, whole=True, allow_zero=True)
        _positive("results_retention_days", self.results_retention_days)
        check_expires(self.result_expires)
        for name in ("publisher_incoming_addr", "publisher_outgoing_addr", "subscribe_addr"):
            check_address(name, getattr(self, name))
        if self.publish_addr:  # empty means "no publisher": handlers run inline
            check_address("publish_addr", self.publish_addr)
        _check_security(self)
        if self.rate_limits != parse_rate_limits(self.rate_limits):
            raise ConfigurationError(
                "RATE_LIMITS: pass it through from_mapping()/replace(), which accept a mapping"
            )
        if not isinstance(self.routes, tuple) or self.routes != parse_routes("ROUTES", self.routes):
            raise ConfigurationError(
                "ROUTES: pass it through from_mapping()/replace(), which accept a mapping"
            )
        if not isinstance(self.record_all_results, bool):
            raise ConfigurationError(
                f"RECORD_ALL_RESULTS: expected true or false, got {self.record_all_results!r}"
            )

    @property
    def run_inline(self) -> bool:
        """True when ``.delay()`` should run the job in the calling process."""
        return self.eager or not self.broker_addr

    def replace(self, **changes: Any) -> Settings:
        """A copy with some values changed (and checked)."""
        return from_mapping(changes, base=self, environ={})

    @property
    def autoscale_bounds(self) -> tuple[int, int] | None:
        """``(MIN, MAX)`` worker processes when autoscaling, else None."""
        return parse_autoscale(self.autoscale)

    @property
    def initial_workers(self) -> int:
        """Worker processes a job manager starts with: ``MIN`` when autoscaling."""
        bounds = self.autoscale_bounds
        return self.concurrency if bounds is None else bounds[0]

    @property
    def queue_names(self) -> tuple[str, ...]:
        return tuple(name for _, name in self.queues)


_FIELDS = {f.name: f for f in fields(Settings)}
#: Every ``EVENTMQ`` key, upper-cased.
KNOWN_KEYS = frozenset(name.upper() for name in _FIELDS)
ENV_PREFIX = "EMQ_"


def unknown_settings_message(keys: list[str]) -> str:
    """One message naming every unknown ``EVENTMQ`` key, each with its likely fix."""
    known = sorted(KNOWN_KEYS)
    parts = []
    for key in keys:
        close = difflib.get_close_matches(str(key).upper(), known, n=1, cutoff=0.6)
        parts.append(f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key))
    noun = "setting" if len(keys) == 1 else "settings"
    return f"EVENTMQ: unknown {noun} {', '.join(parts)}; known settings are {', '.join(known)}"


def from_mapping(
    mapping: Mapping[str, Any] | None = None,
    *,
    base: Settings | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Build settings from a mapping (keys any case) and ``EMQ_*`` variables.

    Unknown keys are an error (a typo must not be silently ignored).
    """
    given = dict(mapping or {})
    unknown = [key for key in given if key.lower() not in _FIELDS]
    if unknown:
        raise ConfigurationError(unknown_settings_message(unknown))
    values = {
        key.lower(): _coerce(key.lower(), _FIELDS[key.lower()].type, v) for key, v in given.items()
    }
    env = os.environ if environ is None else environ
    for name, f in _FIELDS.items():
        text = env.get(ENV_PREFIX + name.upper())
        if text is not None:
            values[name] = _coerce(name, f.type, text)
    if base is None:
        return Settings(**values)
    return dataclasses.replace(base, **values)
