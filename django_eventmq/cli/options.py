"""Command-line options shared by the management commands and ``python -m django_eventmq``.

Both front ends add the same options with :func:`add_router_arguments` /
:func:`add_jobmanager_arguments` and turn them into one validated
:class:`Settings` with :func:`settings_from_options`. An option that is not
given leaves the setting alone (``EVENTMQ`` / ``EMQ_*`` / built-in default),
so every option defaults to ``None`` here. Never imports Django.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any, TextIO

from django_eventmq.cli import admin_client as router_cli
from django_eventmq.errors import ConfigurationError
from django_eventmq.protocol import constants as C
from django_eventmq.runtime.settings import Settings, check_address, parse_queues

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
#: INFO shows start-up and shutdown lines only: components log nothing per message at INFO.
DEFAULT_LOG_LEVEL = "INFO"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_DEFAULTS = Settings()


class OptionError(ConfigurationError):
    """A command-line option has a value that cannot work; the message names it."""


# -- argument types: each error says what was wrong and what would work ------


def _strip_key(message: str) -> str:
    """Drop the ``SETTING_NAME: `` prefix of a settings error (the option is named instead)."""
    head, sep, rest = message.partition(": ")
    return rest if sep and head.isupper() and " " not in head else message


def _address(text: str) -> str:
    try:
        check_address("address", text)
    except ConfigurationError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a ZeroMQ address; use e.g. 'tcp://127.0.0.1:47291', "
            "'tcp://*:47291' or 'ipc:///run/eventmq.sock'"
        ) from None
    return text


def _queues(text: str) -> tuple[tuple[int, str], ...]:
    try:
        queues = parse_queues(text)
        Settings(queues=queues)  # checks names and that at least one is given
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(
            f"{_strip_key(str(exc))} (expected 'name:weight,...', e.g. 'email:30,default:10')"
        ) from None
    return queues


def _whole(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(
                f"expected a whole number >= {minimum}, got {text!r}"
            ) from None
        return value

    parse.__name__ = f"whole number >= {minimum}"
    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}") from None
    return value


def _module(text: str) -> str:
    if not text or not all(part.isidentifier() for part in text.split(".")):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a dotted module path such as 'myapp.jobs'"
        )
    return text


def _log_level(text: str) -> str:
    level = text.upper()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"unknown log level {text!r}; use one of {', '.join(LOG_LEVELS)}"
        )
    return level


def _setting_default(setting: str, shown: object) -> str:
    return f"default: the {setting} setting or EMQ_{setting}, else {shown}"


def _add_log_level(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-level",
        type=_log_level,
        default=DEFAULT_LOG_LEVEL,
        metavar="LEVEL",
        help=(
            f"how much to log to stderr: one of {', '.join(LOG_LEVELS)} "
            f"(default: {DEFAULT_LOG_LEVEL}, which logs start-up and shutdown only)"
        ),
    )


def add_router_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the router's options (the addresses it binds, the log level)."""
    group = parser.add_argument_group("router addresses")
    group.add_argument(
        "--frontend",
        type=_address,
        metavar="ADDR",
        help="address to bind for clients and schedulers ("
        + _setting_default("FRONTEND_ADDR", _DEFAULTS.frontend_addr)
        + ")",
    )
    group.add_argument(
        "--backend",
        type=_address,
        metavar="ADDR",
        help="address to bind for job managers ("
        + _setting_default("BACKEND_ADDR", _DEFAULTS.backend_addr)
        + ")",
    )
    group.add_argument(
        "--admin",
        type=_address,
        metavar="ADDR",
        help="address to bind for administrative commands such as STATUS ("
        + _setting_default("ADMIN_ADDR", _DEFAULTS.admin_addr)
        + ")",
    )
    router_cli.add_durability_arguments(parser)
    _add_log_level(parser)


def add_jobmanager_arguments(
    parser: argparse.ArgumentParser, *, hooks_default: str | None = None
) -> None:
    """Add the job manager's options. ``hooks_default`` is shown and used when --hooks is absent."""
    group = parser.add_argument_group("job manager")
    group.add_argument(
        "--broker",
        "-B",
        type=_address,
        metavar="ADDR",
        help="router backend address to connect to ("
        + _setting_default("WORKER_ADDR", _DEFAULTS.worker_addr)
        + ")",
    )
    shown_queues = ",".join(f"{name}:{weight}" for weight, name in _DEFAULTS.queues)
    group.add_argument(
        "--queues",
        "-Q",
        type=_queues,
        metavar="SPEC",
        help="queues to serve as 'name:weight,...', e.g. 'email:30,default:10'; a higher "
        "weight is served first, a name without weight gets "
        f"{C.DEFAULT_QUEUE_WEIGHT} (" + _setting_default("QUEUES", shown_queues) + ")",
    )
    group.add_argument(
        "--concurrency",
        "-c",
        type=_whole(1),
        metavar="N",
        help="worker processes running jobs ("
        + _setting_default("CONCURRENCY", _DEFAULTS.concurrency)
        + ")",
    )
    group.add_argument(
        "--prefetch",
        type=_whole(0),
        metavar="N",
        help="most jobs to accept beyond the free worker processes, 0 for none ("
        + _setting_default("PREFETCH", _DEFAULTS.prefetch)
        + ")",
    )
    group.add_argument(
        "--prefetch-budget",
        type=_seconds,
        metavar="SECONDS",
        help="queued work per worker process to keep beyond the running job: the prefetch "
        "is this * concurrency / mean job run time, up to --prefetch; 0 for always "
        "--prefetch (" + _setting_default("PREFETCH_BUDGET", _DEFAULTS.prefetch_budget) + ")",
    )
    group.add_argument(
        "--max-jobs-per-child",
        type=_whole(0),
        metavar="N",
        help="replace a worker process after it ran N jobs, 0 for never ("
        + _setting_default("MAX_JOBS_PER_CHILD", _DEFAULTS.max_jobs_per_child)
        + ")",
    )
    group.add_argument(
        "--job-module",
        dest="job_modules",
        action="append",
        type=_module,
        metavar="MODULE",
        help="import MODULE at start-up so its @job functions can run; repeat for more "
        "(added to the JOB_MODULES setting; default: none)",
    )
    group.add_argument(
        "--allow-module",
        dest="allowed_modules",
        action="append",
        type=_module,
        metavar="MODULE",
        help="also run callables of MODULE that are not registered with @job; trusted code "
        "only, repeat for more (added to ALLOWED_JOB_MODULES; default: none)",
    )
    group.add_argument(
        "--hooks",
        type=_module,
        default=hooks_default,
        metavar="MODULE",
        help="module imported in each worker process; its optional setup(), before_job() and "
        f"after_job() functions are called (default: {hooks_default or 'none'})",
    )
    _add_log_level(parser)


#: (option as typed, argparse dest, Settings field)
_OPTION_FIELDS = (
    ("--frontend", "frontend", "frontend_addr"),
    ("--backend", "backend", "backend_addr"),
    ("--admin", "admin", "admin_addr"),
    ("--broker", "broker", "worker_addr"),
    ("--queues", "queues", "queues"),
    ("--concurrency", "concurrency", "concurrency"),
    ("--prefetch", "prefetch", "prefetch"),
    ("--prefetch-budget", "prefetch_budget", "prefetch_budget"),
    ("--max-jobs-per-child", "max_jobs_per_child", "max_jobs_per_child"),
    ("--job-module", "job_modules", "job_modules"),
    ("--allow-module", "allowed_modules", "allowed_job_modules"),
)
_ADDITIVE = frozenset({"job_modules", "allowed_job_modules"})


def settings_from_options(
    base: Settings, options: argparse.Namespace | Mapping[str, Any]
) -> Settings:
    """``base`` with the options that were given applied, validated.

    Raises :class:`OptionError` naming the option and what would work; the
    front ends turn it into a usage error (no traceback).
    """
    values: Mapping[str, Any] = (
        vars(options) if isinstance(options, argparse.Namespace) else options
    )
    changes: dict[str, Any] = {}
    for option, dest, field in _OPTION_FIELDS:
        value = values.get(dest)
        if value is None:
            continue
        if field in _ADDITIVE:
            value = tuple(dict.fromkeys((*getattr(base, field), *value)))
        try:
            base.replace(**{field: value})
        except ConfigurationError as exc:
            raise OptionError(f"{option}: {_strip_key(str(exc))}") from None
        changes[field] = value
    changes.update(router_cli.durability_changes(values))
    try:
        return base.replace(**changes)
    except ConfigurationError as exc:
        raise OptionError(f"the options do not work together: {exc}") from None


def install_signal_handlers(stop: Callable[[], None]) -> None:
    """Make SIGTERM and SIGINT call ``stop()`` (which should only set a flag)."""

    def handle(signum: int, frame: FrameType | None) -> None:
        stop()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


class _StderrHandler(logging.StreamHandler[TextIO]):
    """The handler :func:`configure_logging` installs (found again to avoid doubles)."""


def configure_logging(level: str = DEFAULT_LOG_LEVEL) -> logging.Logger:
    """Log ``django_eventmq.*`` to stderr with time, level and logger name; returns the logger.

    Calling it again replaces its handler rather than adding a second one.
    """
    logger = logging.getLogger("django_eventmq")
    for handler in list(logger.handlers):
        if isinstance(handler, _StderrHandler):
            logger.removeHandler(handler)
    handler = _StderrHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logger.addHandler(handler)
    logger.setLevel(_log_level(level))
    # Our handler is the one that prints: don't print every line twice
    # through a root handler someone else configured.
    logger.propagate = False
    return logger
