"""Command-line options of the scheduler (``manage.py emq_scheduler``). Never imports Django."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from django_eventmq.cli.options import OptionError
from django_eventmq.runtime.settings import Settings, check_address
from django_eventmq.scheduling.timing import CATCHUP_POLICIES


def _address(text: str) -> str:
    try:
        check_address("address", text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a ZeroMQ address; use e.g. 'tcp://127.0.0.1:47291'"
        ) from None
    return text


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def add_scheduler_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the scheduler's options (the log level is added by the caller's shared helper)."""
    group = parser.add_argument_group("scheduler")
    group.add_argument(
        "--broker",
        "-B",
        dest="scheduler_broker",
        type=_address,
        metavar="ADDR",
        help="router frontend address to connect to (default: the BROKER_ADDR setting or "
        "EMQ_BROKER_ADDR, else tcp://127.0.0.1:47291)",
    )
    group.add_argument(
        "--catchup",
        choices=CATCHUP_POLICIES,
        help="what to do with runs that fell due while no scheduler ran: fire the latest "
        "'once', 'skip' them, or fire 'all' (default: the SCHEDULER_CATCHUP setting, else once)",
    )
    group.add_argument(
        "--poll-interval",
        type=_seconds,
        metavar="SECONDS",
        help="how often to look for schedules edited elsewhere, e.g. in the admin "
        "(default: the SCHEDULER_POLL_INTERVAL setting, else 1)",
    )


def scheduler_settings(base: Settings, options: argparse.Namespace | Mapping[str, Any]) -> Settings:
    """``base`` with ``--broker`` applied."""
    values = vars(options) if isinstance(options, argparse.Namespace) else options
    broker = values.get("scheduler_broker")
    if broker is None:
        return base
    try:
        return base.replace(broker_addr=broker)
    except ValueError as exc:
        raise OptionError(f"--broker: {exc}") from None
