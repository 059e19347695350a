"""Helpers of the router-group tests: peers given several router addresses."""

from __future__ import annotations

import pytest

from django_eventmq.errors import ConfigurationError
from django_eventmq.runtime.settings import Settings


def settings_take_lists() -> bool:
    """``Settings`` accepts ``WORKER_ADDR`` / ``BROKER_ADDR`` lists (issue 19)."""
    try:
        Settings(
            worker_addr="tcp://127.0.0.1:1,tcp://127.0.0.1:2",
            broker_addr="tcp://127.0.0.1:3,tcp://127.0.0.1:4",
        )
    except ConfigurationError:
        return False
    return True


#: Job managers and schedulers read their addresses from ``Settings``, whose
#: ``__post_init__`` must check them with ``runtime.addresses.parse_addresses``.
needs_address_lists = pytest.mark.skipif(
    not settings_take_lists(),
    reason="runtime/settings.py still checks WORKER_ADDR/BROKER_ADDR as one address "
    "(it must call runtime.addresses.parse_addresses)",
)
