"""The command-line options' argument types: each refuses a bad value with the same words in
every command, saying what was wrong and what would work (argparse shows the message).

The table of options in :mod:`django_eventmq.cli.options` uses them; it re-exports the
public ones. Never imports Django.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from django_eventmq.errors import ConfigurationError
from django_eventmq.runtime.admin_client import is_admin_list, parse_admin_groups
from django_eventmq.runtime.setting_values import QUEUES_FORMAT
from django_eventmq.runtime.settings import (
    Settings,
    check_address,
    check_peer_addresses,
    parse_autoscale,
    parse_queues,
    parse_rate_limits,
)

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _strip_key(message: str) -> str:
    """Drop the ``SETTING_NAME: `` prefix of a settings error (the option is named instead)."""
    head, sep, rest = message.partition(": ")
    return rest if sep and head.isupper() and " " not in head else message


def address(text: str) -> str:
    """A ZeroMQ address such as ``tcp://127.0.0.1:47291``."""
    try:
        check_address("address", text)
    except ConfigurationError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a ZeroMQ address; use e.g. 'tcp://127.0.0.1:47291', "
            "'tcp://*:47291' or 'ipc:///run/eventmq.sock'"
        ) from None
    return text


def addresses(text: str) -> str:
    """A router's address, or a router group's members separated by commas."""
    if "," not in text:
        return address(text)
    try:
        check_peer_addresses("address", text)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(_strip_key(str(exc))) from None
    return text


def admin_addresses(text: str) -> str:
    """``emq_status --admin``: one router's admin address (checked as :func:`address` checks
    one), or several routers' as ``a,b;c`` (',' between the members of a router group, ';'
    between groups)."""
    if not is_admin_list(text):
        return address(text)
    try:
        parse_admin_groups(text, "ADMIN")
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(_strip_key(str(exc))) from None
    return text


def queues(text: str) -> tuple[tuple[int, str], ...]:
    """``name:weight,...`` as the QUEUES setting takes it."""
    try:
        parsed = parse_queues(text)
        Settings(queues=parsed)  # checks names and that at least one is given
    except ConfigurationError as exc:
        message = _strip_key(str(exc))
        if QUEUES_FORMAT not in message:
            message += " (expected 'name:weight,...', e.g. 'email:30,default:10')"
        raise argparse.ArgumentTypeError(message) from None
    return parsed


def whole(minimum: int) -> Callable[[str], int]:
    """A whole number >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {text!r}")
        return value

    parse.__name__ = f"whole number >= {minimum}"
    return parse


def seconds(minimum: float = 0.0, *, inclusive: bool = True) -> Callable[[str], float]:
    """A finite number of seconds >= ``minimum`` (> ``minimum`` unless ``inclusive``)."""
    bound = f"{'>=' if inclusive else '>'} {minimum:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")  # fails both comparisons below
        ok = value >= minimum if inclusive else value > minimum
        if not (ok and value < float("inf")):
            raise argparse.ArgumentTypeError(f"expected a number of seconds {bound}, got {text!r}")
        return value

    parse.__name__ = f"seconds {bound}"
    return parse


def rate_limit(text: str) -> tuple[str, str]:
    """``QUEUE=RATE`` as one RATE_LIMITS entry, e.g. ``email=100/m``."""
    try:
        return parse_rate_limits([text])[0]
    except ConfigurationError as exc:
        why = str(exc).split(": ", 1)[-1]
        raise argparse.ArgumentTypeError(f"{text!r}: {why}") from None


def autoscale(text: str) -> str:
    """``MIN,MAX`` worker processes, ``1 <= MIN <= MAX``."""
    try:
        parse_autoscale(text)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(_strip_key(str(exc))) from None
    return text


def module(text: str) -> str:
    """A dotted module path such as ``myapp.jobs``."""
    if not text or not all(part.isidentifier() for part in text.split(".")):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a dotted module path such as 'myapp.jobs'"
        )
    return text


def log_level(text: str) -> str:
    """One of :data:`LOG_LEVELS`, any case."""
    level = text.upper()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"unknown log level {text!r}; use one of {', '.join(LOG_LEVELS)}"
        )
    return level
