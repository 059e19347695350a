"""Router command-line pieces: the journal / back-pressure options, and asking a
running router's admin socket (``emq_status --monitor``).

Wiring (core/cli.py): call :func:`add_durability_arguments` from
``add_router_arguments`` and merge :func:`durability_changes` into the
settings changes. Never imports Django.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import Any

from ..errors import BrokerUnavailable
from ..protocol import AdminRequest, Reply, new_msgid
from ..protocol import constants as C
from . import transport
from .settings import Settings

_DEFAULTS = Settings()


def _whole(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def add_durability_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--journal PATH``, ``--no-journal``, ``--journal-sync``, ``--high-water-mark``
    and ``--hwm-policy`` (all default to None: the setting applies)."""
    group = parser.add_argument_group("journal and back-pressure")
    where = group.add_mutually_exclusive_group()
    where.add_argument(
        "--journal",
        dest="journal_path",
        metavar="PATH",
        help="file of the on-disk journal that keeps every accepted job until it finished "
        f"(default: the JOURNAL_PATH setting or EMQ_JOURNAL_PATH, else "
        f"{_DEFAULTS.journal_path!r}; {{frontend}} becomes the frontend address)",
    )
    where.add_argument(
        "--no-journal",
        dest="journal",
        action="store_const",
        const=False,
        help="keep jobs in memory only: a router restart loses the jobs it holds",
    )
    group.add_argument(
        "--journal-sync",
        choices=("full", "normal"),
        help="'full': ACK once the job is on stable storage (survives a power cut); "
        "'normal': once the OS has it (survives a router crash) (default: JOURNAL_SYNC, "
        f"else {_DEFAULTS.journal_sync})",
    )
    group.add_argument(
        "--high-water-mark",
        type=_whole,
        metavar="N",
        help="waiting jobs at which clients are held back (default: HIGH_WATER_MARK, "
        f"else {_DEFAULTS.high_water_mark})",
    )
    group.add_argument(
        "--hwm-policy",
        choices=("block", "reject"),
        help="above the mark: 'block' stops reading clients (their sends wait, nothing is "
        "lost), 'reject' answers REJECT with a reason (default: HWM_POLICY, else "
        f"{_DEFAULTS.hwm_policy})",
    )


#: (argparse dest, Settings field) of the options above.
DURABILITY_FIELDS = (
    ("journal_path", "journal_path"),
    ("journal", "journal"),
    ("journal_sync", "journal_sync"),
    ("high_water_mark", "high_water_mark"),
    ("hwm_policy", "hwm_policy"),
)


def durability_changes(options: argparse.Namespace | Mapping[str, Any]) -> dict[str, Any]:
    """The settings the durability options that were given change."""
    values = vars(options) if isinstance(options, argparse.Namespace) else options
    changes = {
        field: values[dest] for dest, field in DURABILITY_FIELDS if values.get(dest) is not None
    }
    if "journal_path" in changes:
        changes["journal"] = True
    return changes


def ask(admin_addr: str, command: str, timeout: float = 5.0) -> dict[str, Any]:
    """Send one admin command (STATUS, MONITOR, ...) to a router; its JSON answer."""
    channel = transport.Channel(transport.DEALER, connect=admin_addr)
    try:
        channel.send(AdminRequest(msgid=new_msgid(), action=command))
        if not channel.poll(int(timeout * 1000)):
            raise BrokerUnavailable(f"no answer to {command} from {admin_addr} within {timeout}s")
        _identity, _frames, message = channel.recv()
        if not isinstance(message, Reply):
            raise BrokerUnavailable(f"unexpected {message.command} from {admin_addr}")
        answer = json.loads(message.payload)
        if not isinstance(answer, dict):
            raise BrokerUnavailable(f"{command} answer from {admin_addr} is not an object")
        return answer
    finally:
        channel.close()


def format_monitor(info: Mapping[str, Any]) -> str:
    """MONITOR's answer as ``key: value`` lines (PZQ's monitor format), queues after."""
    keys = (
        "queued",
        "in_flight",
        "delayed",
        "poisoned",
        "store_bytes",
        "syncs",
        "expired",
        "requeued",
        "duplicates",
        "rejected",
        "blocked",
        "journal",
    )
    lines = [f"{key}: {info.get(key)}" for key in keys if key in info]
    for queue, counts in sorted(info.get("per_queue", {}).items()):
        shown = " ".join(f"{k}={v}" for k, v in counts.items())
        lines.append(f"queue {queue}: {shown}")
    return "\n".join(lines)


def monitor(admin_addr: str, timeout: float = 5.0) -> str:
    """``emq_status --monitor``: the router's journal state as text."""
    return format_monitor(ask(admin_addr, C.MONITOR, timeout))
