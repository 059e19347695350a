"""Every command's options, in one place, for the management commands and ``python -m``.

Each option is one row (:class:`~.option_row.Option`): its flags, the setting it overrides
(if any), its argument type and its help. The same rows feed argparse
(:func:`add_options` and the ``add_*_arguments`` helpers) and
:func:`settings_from_options`, so an option that is shown is an option that
works, and one argument type (:mod:`~django_eventmq.cli.arg_types`: :func:`seconds`,
:func:`whole`, :func:`address`, :func:`module`, :func:`log_level`) refuses a bad value
with the same words in every command. An option that is not given leaves its setting alone
(``EVENTMQ`` / ``EMQ_*`` / built-in default), so setting-backed options
default to ``None``. Never imports Django.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from django_eventmq.cli.arg_types import LOG_LEVELS as LOG_LEVELS
from django_eventmq.cli.arg_types import _strip_key
from django_eventmq.cli.arg_types import address as address
from django_eventmq.cli.arg_types import addresses as addresses
from django_eventmq.cli.arg_types import admin_addresses as admin_addresses
from django_eventmq.cli.arg_types import autoscale as autoscale
from django_eventmq.cli.arg_types import log_level as log_level
from django_eventmq.cli.arg_types import module as module
from django_eventmq.cli.arg_types import queues as queues
from django_eventmq.cli.arg_types import rate_limit as rate_limit
from django_eventmq.cli.arg_types import seconds as seconds
from django_eventmq.cli.arg_types import whole as whole
from django_eventmq.cli.log_setup import DEFAULT_LOG_LEVEL as DEFAULT_LOG_LEVEL
from django_eventmq.cli.log_setup import LOG_FORMAT as LOG_FORMAT
from django_eventmq.cli.log_setup import configure_logging as configure_logging
from django_eventmq.cli.option_row import Option as Option
from django_eventmq.cli.option_row import OptionError as OptionError
from django_eventmq.cli.option_row import add_options as add_options
from django_eventmq.errors import ConfigurationError
from django_eventmq.protocol import constants as C
from django_eventmq.pubsub.publisher import PUBLISHER_SNDHWM
from django_eventmq.runtime.settings import JOURNAL_URL_SCHEMES, Settings
from django_eventmq.scheduling.timing import CATCHUP_POLICIES

__all__ = [
    "DEFAULT_LOG_LEVEL",
    "LOG_LEVELS",
    "Option",
    "OptionError",
    "add_jobmanager_arguments",
    "add_options",
    "add_publisher_arguments",
    "add_router_arguments",
    "add_scheduler_arguments",
    "add_status_arguments",
    "add_subscriber_arguments",
    "address",
    "admin_addresses",
    "configure_logging",
    "log_level",
    "metrics_module",
    "module",
    "seconds",
    "settings_from_options",
    "whole",
]

_DEFAULTS = Settings()
#: What to install for ``--metrics`` (the ``metrics`` extra of pyproject.toml).
METRICS_EXTRA = "pip install 'django-eventmq[metrics]'"


LOG_LEVEL = Option(
    ("--log-level",),
    f"how much to log to stderr: one of {', '.join(LOG_LEVELS)} (default: "
    f"{DEFAULT_LOG_LEVEL}, which logs start-up and shutdown only)",
    type=log_level,
    default=DEFAULT_LOG_LEVEL,
    metavar="LEVEL",
)

METRICS = Option(
    ("--metrics",),
    "serve Prometheus metrics at http://ADDR/metrics (HOST:PORT or :PORT; default: none; "
    f"needs the metrics extra: {METRICS_EXTRA})",
    metavar="ADDR",
)


def metrics_module() -> ModuleType:
    """:mod:`.metrics`, for ``--metrics``; an :class:`OptionError` saying which extra to
    install when prometheus-client (which it is built on) does not import."""
    try:
        from django_eventmq.cli import metrics
    except ImportError as exc:
        raise OptionError(
            f"--metrics needs prometheus-client, which does not import here ({exc}): "
            f"{METRICS_EXTRA}"
        ) from None
    return metrics


ROUTER = (
    Option(
        ("--frontend",),
        "address to bind for clients and schedulers",
        "frontend_addr",
        type=address,
        metavar="ADDR",
    ),
    Option(
        ("--backend",),
        "address to bind for job managers",
        "backend_addr",
        type=address,
        metavar="ADDR",
    ),
    Option(
        ("--admin",),
        "address to bind for administrative commands such as STATUS",
        "admin_addr",
        type=address,
        metavar="ADDR",
    ),
)

DURABILITY = (
    Option(
        ("--journal",),
        "where the journal keeps every accepted job until it finished: a file (SQLite; "
        "{frontend} becomes the frontend address), or a PostgreSQL URL "
        "(postgresql://user@host:5432/db, the JOURNAL_URL setting; under manage.py also a "
        "DATABASES alias such as 'default') shared by the routers of one --group, of which "
        "one serves and the others stand by",
        "journal_path",
        dest="journal_path",
        metavar="PATH|URL",
        implies=(("journal", True),),
        shown=repr(_DEFAULTS.journal_path),
        exclusive="journal",
        redirect=tuple((scheme, "journal_url") for scheme in JOURNAL_URL_SCHEMES),
    ),
    Option(
        ("--no-journal",),
        "keep jobs in memory only: a router restart loses the jobs it holds",
        "journal",
        action="store_const",
        const=False,
        shown="on",
        exclusive="journal",
    ),
    Option(
        ("--journal-recover",),
        "if the journal fails its checks at start (damaged file, lost -wal content), move "
        "its files aside to PATH.damaged-TIME, copy every job SQLite can still read into a "
        "new journal, then start (default: off)",
        action="store_true",
    ),
    Option(
        ("--group",),
        "router group of a PostgreSQL --journal: routers with the same journal URL and "
        "group share its jobs and elect one leader ([a-z0-9_], at most 40 characters)",
        "group",
        metavar="NAME",
    ),
    Option(
        ("--lease-seconds",),
        "router group: how long the leader's lease lasts unrenewed, hence roughly how long "
        "a dead leader goes unreplaced; longer than HEARTBEAT_INTERVAL",
        "lease_seconds",
        type=seconds(0, inclusive=False),
        metavar="SECONDS",
        shown=f"{_DEFAULTS.lease_seconds:g}",
    ),
    Option(
        ("--journal-sync",),
        "'full': ACK once the job is on stable storage (survives a power cut); 'normal': "
        "once the OS has it (survives a router crash)",
        "journal_sync",
        choices=("full", "normal"),
    ),
    Option(
        ("--high-water-mark",),
        "waiting jobs at which clients are held back",
        "high_water_mark",
        type=whole(1),
        metavar="N",
    ),
    Option(
        ("--hwm-policy",),
        "above the mark: 'block' stops reading clients (their sends wait, nothing is "
        "lost), 'reject' answers REJECT with a reason",
        "hwm_policy",
        choices=("block", "reject"),
    ),
    Option(
        ("--rate-limit",),
        "hand out at most N jobs of QUEUE per period across all job managers, e.g. "
        "'email=100/m' (units s, m, h, d); repeat for more queues (added to the setting)",
        "rate_limits",
        dest="rate_limits",
        action="append",
        type=rate_limit,
        metavar="QUEUE=RATE",
        additive=True,
        shown="none",
    ),
)

_HOOKS = Option(
    ("--hooks",),
    "module imported in each worker process; its optional setup(), before_job() and "
    "after_job() functions are called (default: none)",
    type=module,
    metavar="MODULE",
)

JOBMANAGER = (
    Option(
        ("--broker", "-B"),
        "router backend address to connect to (a router group: every member's, comma separated)",
        "worker_addr",
        type=addresses,
        metavar="ADDR",
    ),
    Option(
        ("--queues", "-Q"),
        "queues to serve as 'name:weight,...', e.g. 'email:30,default:10'; a higher weight "
        f"is served first, a name without weight gets {C.DEFAULT_QUEUE_WEIGHT}",
        "queues",
        type=queues,
        metavar="SPEC",
        shown=",".join(f"{name}:{weight}" for weight, name in _DEFAULTS.queues),
    ),
    Option(
        ("--concurrency", "-c"),
        "worker processes running jobs (a fixed number; or --autoscale, not both)",
        "concurrency",
        type=whole(1),
        metavar="N",
        implies=(("autoscale", ""),),  # a fixed number given here beats an AUTOSCALE setting
    ),
    Option(
        ("--autoscale",),
        "grow the worker processes up to MAX while all are busy and the router fills "
        "every slot, shrink back to MIN once they idle (--autoscale-idle); replaces "
        "--concurrency, so give one of the two",
        "autoscale",
        type=autoscale,
        metavar="MIN,MAX",
        shown="off",
    ),
    Option(
        ("--autoscale-idle",),
        "seconds a worker process idles before --autoscale stops it (never below MIN)",
        "autoscale_idle",
        type=seconds(0, inclusive=False),
        metavar="SECONDS",
    ),
    Option(
        ("--prefetch",),
        "most jobs to accept beyond the free worker processes, 0 for none",
        "prefetch",
        type=whole(0),
        metavar="N",
    ),
    Option(
        ("--prefetch-budget",),
        "queued work per worker process to keep beyond the running job: the prefetch is "
        "this * concurrency / mean job run time, up to --prefetch; 0 for always --prefetch",
        "prefetch_budget",
        type=seconds(0),
        metavar="SECONDS",
    ),
    Option(
        ("--async-concurrency",),
        "async def jobs one worker process runs at once on its event loop, 1 for one job at a time",
        "async_concurrency",
        type=whole(1),
        metavar="N",
    ),
    Option(
        ("--max-jobs-per-child",),
        "replace a worker process after it ran N jobs, 0 for never",
        "max_jobs_per_child",
        type=whole(0),
        metavar="N",
    ),
    Option(
        ("--job-module",),
        "import MODULE at start-up so its @job functions can run; repeat for more "
        "(added to the setting)",
        "job_modules",
        dest="job_modules",
        action="append",
        type=module,
        metavar="MODULE",
        additive=True,
        shown="none",
    ),
    Option(
        ("--allow-module",),
        "also run callables of MODULE that are not registered with @job; trusted code "
        "only, repeat for more (added to the setting)",
        "allowed_job_modules",
        dest="allowed_modules",
        action="append",
        type=module,
        metavar="MODULE",
        additive=True,
        shown="none",
    ),
    _HOOKS,
)

SCHEDULER = (
    Option(
        ("--broker", "-B"),
        "router frontend address to connect to (a router group: every member's, comma separated)",
        "broker_addr",
        dest="scheduler_broker",
        type=addresses,
        metavar="ADDR",
    ),
    Option(
        ("--catchup",),
        "what to do with runs that fell due while no scheduler ran: fire the latest "
        "'once', 'skip' them, or fire 'all'",
        "scheduler_catchup",
        choices=CATCHUP_POLICIES,
    ),
    Option(
        ("--poll-interval",),
        "how often to look for schedules edited elsewhere, e.g. in the admin",
        "scheduler_poll_interval",
        type=seconds(0, inclusive=False),
        metavar="SECONDS",
        shown=f"{_DEFAULTS.scheduler_poll_interval:g}",
    ),
)

PUBLISHER = (
    Option(
        ("--incoming",),
        "address to bind for PUBLISH messages",
        "publisher_incoming_addr",
        type=address,
        metavar="ADDR",
    ),
    Option(
        ("--outgoing",),
        "address to bind for subscribers",
        "publisher_outgoing_addr",
        type=address,
        metavar="ADDR",
    ),
    Option(
        ("--hwm",),
        "messages queued per subscriber; while a slow subscriber's queue is full, new "
        f"messages for it are dropped (default: {PUBLISHER_SNDHWM})",
        type=whole(1),
        default=PUBLISHER_SNDHWM,
        metavar="N",
    ),
)

SUBSCRIBER = (
    Option(
        ("--connect",),
        "publisher outgoing address to subscribe to",
        "subscribe_addr",
        dest="subscribe",
        type=address,
        metavar="ADDR",
    ),
    Option(
        ("--subscriber-module",),
        "import MODULE at start-up so its @subscriber handlers run; repeat for more "
        "(default: none)",
        dest="subscriber_modules",
        action="append",
        type=module,
        default=[],
        metavar="MODULE",
    ),
)

STATUS = (
    Option(
        ("--admin",),
        "the admin address of the router to read, or of several routers: 'a,b;c' (',' "
        "between the members of a router group, ';' between groups) (default: the "
        "STATUS_ADMIN_ADDRS setting or EMQ_STATUS_ADMIN_ADDRS, else the ADMIN_ADDR setting or "
        f"EMQ_ADMIN_ADDR, else {_DEFAULTS.admin_addr})",
        type=admin_addresses,
        metavar="ADDR",
    ),
    Option(("--json",), "print JSON (with --watch: one object per line)", action="store_true"),
    Option(
        ("--watch",),
        "refresh every --interval seconds (redrawn in place on a terminal) until Ctrl-C",
        action="store_true",
    ),
    Option(
        ("--interval",),
        "seconds between refreshes with --watch (default: 2)",
        type=seconds(0, inclusive=False),
        default=2.0,
        metavar="SECONDS",
    ),
    Option(
        ("--monitor",),
        "also show the journal's state (admin command MONITOR): queued, in flight, store "
        "size, syncs, expired, poisoned, per queue",
        action="store_true",
    ),
    Option(
        ("--jobs",),
        "also list the jobs handed out to job managers (admin command ROUTER_SHOW_JOBS): "
        "running ones with their worker process's pid, prefetched ones, each with its job, "
        "queue, job manager and age",
        action="store_true",
    ),
    Option(
        ("--stop",),
        "stop the router instead (admin command DISCONNECT: it says KBAI to its peers and "
        "exits); sends the router's admin token, read from the ADMIN_TOKEN_FILE setting's "
        "file (run as the router's user), or with CURVE uses the admin key",
        action="store_true",
    ),
    Option(
        ("--timeout",),
        "how long to wait for each answer of the router (default: 2)",
        type=seconds(0, inclusive=False),
        default=2.0,
        metavar="SECONDS",
    ),
)

#: Every option that overrides a setting, whichever command has it.
_SETTING_OPTIONS = tuple(
    option
    for table in (ROUTER, DURABILITY, JOBMANAGER, SCHEDULER, PUBLISHER, SUBSCRIBER)
    for option in table
    if option.setting is not None
)


# -- per command ----------------------------------------------------------------


def add_router_arguments(parser: argparse.ArgumentParser, *, metrics: bool = False) -> None:
    """The router's options: addresses, journal and back-pressure, log level (and --metrics)."""
    add_options(parser, "router addresses", ROUTER)
    add_options(parser, "journal and back-pressure", DURABILITY)
    _add_common(parser, metrics)


def add_jobmanager_arguments(
    parser: argparse.ArgumentParser, *, hooks_default: str | None = None, metrics: bool = False
) -> None:
    """The job manager's options. ``hooks_default`` is shown and used when --hooks is absent."""
    table: tuple[Option, ...] = JOBMANAGER
    if hooks_default is not None:
        hooks = dataclasses.replace(
            _HOOKS,
            default=hooks_default,
            help=_HOOKS.help.replace("(default: none)", f"(default: {hooks_default})"),
        )
        table = tuple(hooks if option is _HOOKS else option for option in table)
    add_options(parser, "job manager", table)
    _add_common(parser, metrics)


def _process_arguments(
    title: str, table: tuple[Option, ...]
) -> Callable[[argparse.ArgumentParser], None]:
    """An ``add_*_arguments`` for a process whose options are ``table`` and the log level."""

    def add(parser: argparse.ArgumentParser) -> None:
        add_options(parser, title, table)
        _add_common(parser, False)

    add.__doc__ = f"Add the {title}'s options and --log-level."
    return add


add_scheduler_arguments = _process_arguments("scheduler", SCHEDULER)
add_publisher_arguments = _process_arguments("publisher", PUBLISHER)
add_subscriber_arguments = _process_arguments("subscriber", SUBSCRIBER)


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    """``emq_status`` / ``status``: which router, what to show, how often."""
    add_options(parser, "status", STATUS)


def _add_common(parser: argparse.ArgumentParser, metrics: bool) -> None:
    add_options(parser, "output", (LOG_LEVEL, METRICS) if metrics else (LOG_LEVEL,))


def settings_from_options(
    base: Settings, options: argparse.Namespace | Mapping[str, Any]
) -> Settings:
    """``base`` with the setting-backed options that were given applied, validated.

    Raises :class:`OptionError` naming the option and what would work; the
    front ends turn it into a usage error (no traceback).
    """
    values: Mapping[str, Any] = (
        vars(options) if isinstance(options, argparse.Namespace) else options
    )
    if values.get("concurrency") is not None and values.get("autoscale") is not None:
        raise OptionError(
            "--concurrency and --autoscale both given: drop --concurrency for worker "
            "processes that grow and shrink between MIN and MAX, or drop --autoscale for "
            "a fixed number"
        )
    changes: dict[str, Any] = {}
    for option in _SETTING_OPTIONS:
        value = values.get(option.key)
        if value is None:
            continue
        setting = option.target(value)
        assert setting is not None
        if option.additive:
            value = tuple(dict.fromkeys((*getattr(base, setting), *value)))
        try:
            base.replace(**{setting: value})
        except ConfigurationError as exc:
            raise OptionError(f"{option.name}: {_strip_key(str(exc))}") from None
        changes[setting] = value
        changes.update(option.implies)
    try:
        return base.replace(**changes)
    except ConfigurationError as exc:
        raise OptionError(f"the options do not work together: {exc}") from None
