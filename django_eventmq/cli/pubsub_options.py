"""Command-line options of the publisher and the subscriber consumer. Never imports Django.

Shared by ``python -m django_eventmq pubsub|subscribe`` and the
``emq_pubsub`` / ``emq_subscribe`` management commands. An option that is not
given leaves the setting alone (``EVENTMQ`` / ``EMQ_*`` / built-in default).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from django_eventmq.cli import options as cli
from django_eventmq.errors import ConfigurationError
from django_eventmq.pubsub.publisher import PUBLISHER_SNDHWM
from django_eventmq.runtime.settings import Settings, check_address

_DEFAULTS = Settings()


def _address(text: str) -> str:
    try:
        check_address("address", text)
    except ConfigurationError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a ZeroMQ address; use e.g. 'tcp://127.0.0.1:47298', "
            "'tcp://*:47298' or 'ipc:///run/eventmq-pub.sock'"
        ) from None
    return text


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def _module(text: str) -> str:
    if not text or not all(part.isidentifier() for part in text.split(".")):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a dotted module path such as 'myapp.subscribers'"
        )
    return text


def _log_level(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-level",
        type=str.upper,
        default=cli.DEFAULT_LOG_LEVEL,
        choices=cli.LOG_LEVELS,
        metavar="LEVEL",
        help=f"one of {', '.join(cli.LOG_LEVELS)} (default: {cli.DEFAULT_LOG_LEVEL}, "
        "which logs start-up and shutdown only)",
    )


def add_pubsub_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the publisher's options (its two addresses, the queue bound, the log level)."""
    group = parser.add_argument_group("publisher")
    group.add_argument(
        "--incoming",
        type=_address,
        metavar="ADDR",
        help="address to bind for PUBLISH messages (default: the PUBLISHER_INCOMING_ADDR "
        f"setting or EMQ_PUBLISHER_INCOMING_ADDR, else {_DEFAULTS.publisher_incoming_addr})",
    )
    group.add_argument(
        "--outgoing",
        type=_address,
        metavar="ADDR",
        help="address to bind for subscribers (default: the PUBLISHER_OUTGOING_ADDR "
        f"setting or EMQ_PUBLISHER_OUTGOING_ADDR, else {_DEFAULTS.publisher_outgoing_addr})",
    )
    group.add_argument(
        "--hwm",
        type=_positive_int,
        default=PUBLISHER_SNDHWM,
        metavar="N",
        help="messages queued per subscriber; while a slow subscriber's queue is full, new "
        f"messages for it are dropped (default: {PUBLISHER_SNDHWM})",
    )
    _log_level(parser)


def add_subscribe_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the consumer's options (where to connect, extra handler modules, the log level)."""
    group = parser.add_argument_group("subscriber")
    group.add_argument(
        "--connect",
        dest="subscribe",
        type=_address,
        metavar="ADDR",
        help="publisher outgoing address to subscribe to (default: the SUBSCRIBE_ADDR "
        f"setting or EMQ_SUBSCRIBE_ADDR, else {_DEFAULTS.subscribe_addr})",
    )
    group.add_argument(
        "--subscriber-module",
        dest="subscriber_modules",
        action="append",
        type=_module,
        default=[],
        metavar="MODULE",
        help="import MODULE at start-up so its @subscriber handlers run; repeat for more",
    )
    _log_level(parser)


#: (option as typed, argparse dest, Settings field)
_OPTION_FIELDS = (
    ("--incoming", "incoming", "publisher_incoming_addr"),
    ("--outgoing", "outgoing", "publisher_outgoing_addr"),
    ("--connect", "subscribe", "subscribe_addr"),
)


def pubsub_settings(base: Settings, options: argparse.Namespace | Mapping[str, Any]) -> Settings:
    """``base`` with the publisher/subscriber options that were given applied."""
    values = vars(options) if isinstance(options, argparse.Namespace) else options
    settings = base
    for option, dest, field in _OPTION_FIELDS:
        value = values.get(dest)
        if value is None:
            continue
        try:
            settings = settings.replace(**{field: value})
        except ConfigurationError as exc:
            raise cli.OptionError(f"{option}: {exc}") from None
    return settings
