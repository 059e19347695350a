"""Runtime settings as one frozen dataclass, with validation that says how to fix.

Built from (lowest to highest precedence) the defaults, a mapping such as
Django's ``settings.EVENTMQ``, and ``EMQ_*`` environment variables. Command
line options are applied on top by the commands with :meth:`Settings.replace`.
This module never imports Django: the router and Spark executors use it bare.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from ..errors import ConfigurationError
from ..protocol import constants as C

QueueList = tuple[tuple[int, str], ...]

_ADDRESS = re.compile(
    r"^(tcp://[^\s:]+:(\d+|\*)|tcp://\[[0-9a-fA-F:.]+\]:(\d+|\*)|ipc://\S+|inproc://\S+)$"
)
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


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
    #: Queues a job manager serves, ``((weight, name), ...)``; higher weight first.
    queues: QueueList = ((C.DEFAULT_QUEUE_WEIGHT, C.DEFAULT_QUEUE_NAME),)
    #: Worker processes per job manager.
    concurrency: int = 4
    #: Jobs handed to a job manager beyond its free processes (READY slots).
    prefetch: int = 0
    #: A worker process is replaced after running this many jobs (0: never).
    max_jobs_per_child: int = 0
    #: Seconds between heartbeats, and of silence after which a peer is dead.
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

    def __post_init__(self) -> None:
        for name in ("worker_addr", "frontend_addr", "backend_addr", "admin_addr"):
            check_address(name, getattr(self, name))
        if self.broker_addr:  # empty means "no broker": jobs run inline
            check_address("broker_addr", self.broker_addr)
        if not self.queues:
            raise ConfigurationError("QUEUES is empty: name at least one queue, e.g. 'default:10'")
        for _weight, name in self.queues:
            if not _QUEUE_NAME.match(name):
                raise ConfigurationError(
                    f"QUEUES: queue name {name!r} may only hold letters, digits, '_', '.' and '-'"
                )
        _positive("concurrency", self.concurrency, whole=True)
        _positive("heartbeat_interval", self.heartbeat_interval)
        _positive("heartbeat_timeout", self.heartbeat_timeout)
        _positive("shutdown_grace", self.shutdown_grace, allow_zero=True)
        _positive("reconnect_max_delay", self.reconnect_max_delay)
        _positive("send_timeout", self.send_timeout)
        _positive("prefetch", self.prefetch, whole=True, allow_zero=True)
        _positive("max_jobs_per_child", self.max_jobs_per_child, whole=True, allow_zero=True)
        if self.scheduler_catchup not in ("once", "skip", "all"):
            raise ConfigurationError(
                "SCHEDULER_CATCHUP: expected 'once', 'skip' or 'all', "
                f"got {self.scheduler_catchup!r}"
            )
        _positive("scheduler_poll_interval", self.scheduler_poll_interval)
        _positive("scheduler_misfire_grace", self.scheduler_misfire_grace, allow_zero=True)
        _positive("scheduler_run_retention", self.scheduler_run_retention)
        if self.heartbeat_timeout <= self.heartbeat_interval:
            raise ConfigurationError(
                "HEARTBEAT_TIMEOUT must be longer than HEARTBEAT_INTERVAL, or live peers "
                f"look dead (got {self.heartbeat_timeout} <= {self.heartbeat_interval})"
            )

    @property
    def run_inline(self) -> bool:
        """True when ``.delay()`` should run the job in the calling process."""
        return self.eager or not self.broker_addr

    def replace(self, **changes: Any) -> Settings:
        """A copy with some values changed (and checked)."""
        return from_mapping(changes, base=self, environ={})

    @property
    def queue_names(self) -> tuple[str, ...]:
        return tuple(name for _, name in self.queues)


def check_address(name: str, value: object) -> None:
    """Raise :class:`ConfigurationError` unless ``value`` is a ZeroMQ endpoint."""
    if not isinstance(value, str) or not _ADDRESS.match(value):
        raise ConfigurationError(
            f"{name.upper()}: {value!r} is not a ZeroMQ address; "
            "use e.g. 'tcp://127.0.0.1:47291' or 'ipc:///run/eventmq.sock'"
        )


def _positive(name: str, value: object, *, whole: bool = False, allow_zero: bool = False) -> None:
    ok = (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and (isinstance(value, int) or not whole)
        and (value > 0 or (allow_zero and value == 0))
    )
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        kind = "a whole number" if whole else "a number"
        raise ConfigurationError(f"{name.upper()}: expected {kind} {bound}, got {value!r}")


def parse_queues(value: object) -> QueueList:
    """Parse a queue list: ``"email:30,default:10"``, ``["email", "default"]`` or
    ``[(30, "email"), ...]`` / ``[["email", 30], ...]``. A name without a weight
    gets the default weight."""
    items: list[Any]
    if isinstance(value, str):
        items = [part.strip() for part in value.replace(" ", ",").split(",") if part.strip()]
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        raise ConfigurationError(f"QUEUES: expected 'name:weight,...' or a list, got {value!r}")
    queues: list[tuple[int, str]] = []
    for item in items:
        if isinstance(item, str):
            name, sep, weight_text = item.partition(":")
            try:
                weight = int(weight_text) if sep else C.DEFAULT_QUEUE_WEIGHT
            except ValueError:
                raise ConfigurationError(
                    f"QUEUES: weight of {name!r} must be a whole number, got {weight_text!r}"
                ) from None
        elif isinstance(item, list | tuple) and len(item) == 2:
            a, b = item
            weight, name = (a, b) if isinstance(a, int) else (b, a)
            if not isinstance(weight, int) or not isinstance(name, str):
                raise ConfigurationError(f"QUEUES: entry {item!r} is not (weight, name)")
        else:
            raise ConfigurationError(
                f"QUEUES: entry {item!r} is not 'name:weight' or (weight, name)"
            )
        if weight < 0:
            raise ConfigurationError(f"QUEUES: weight of {name!r} must be >= 0, got {weight}")
        queues.append((weight, name))
    names = [name for _, name in queues]
    if len(set(names)) != len(names):
        raise ConfigurationError(f"QUEUES: a queue is named twice in {names}")
    return tuple(queues)


def _coerce(field_name: str, kind: Any, value: Any) -> Any:
    """Turn a setting's value (possibly text from the environment) into its type."""
    key = field_name.upper()
    if field_name == "queues":
        return parse_queues(value)
    if kind in ("bool", bool):
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off", ""):
            return False
        raise ConfigurationError(f"{key}: expected true or false, got {value!r}")
    if kind in ("int", int):
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                raise ConfigurationError(f"{key}: expected a whole number, got {value!r}") from None
        return value
    if kind in ("float", float):
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise ConfigurationError(f"{key}: expected a number, got {value!r}") from None
        return value
    if kind in ("tuple[str, ...]",):
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ConfigurationError(f"{key}: expected a list of module names, got {value!r}")
    return value


_FIELDS = {f.name: f for f in fields(Settings)}
ENV_PREFIX = "EMQ_"


def from_mapping(
    mapping: Mapping[str, Any] | None = None,
    *,
    base: Settings | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Build settings from a mapping (keys any case) and ``EMQ_*`` variables.

    Unknown keys are an error (a typo must not be silently ignored).
    """
    values: dict[str, Any] = {}
    for key, value in (mapping or {}).items():
        name = key.lower()
        if name not in _FIELDS:
            raise ConfigurationError(
                f"EVENTMQ: unknown setting {key!r}; known settings are "
                + ", ".join(sorted(n.upper() for n in _FIELDS))
            )
        values[name] = _coerce(name, _FIELDS[name].type, value)
    env = os.environ if environ is None else environ
    for name, f in _FIELDS.items():
        text = env.get(ENV_PREFIX + name.upper())
        if text is not None:
            values[name] = _coerce(name, f.type, text)
    if base is None:
        return Settings(**values)
    return dataclasses.replace(base, **values)
