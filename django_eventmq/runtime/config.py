"""Where the runtime packages get their settings.

Without Django, settings come from ``EMQ_*`` environment variables. The
Django app installs a provider in ``AppConfig.ready()`` that reads
``settings.EVENTMQ`` lazily, so nothing is read at import time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from django_eventmq.runtime.settings import Settings, from_mapping

_lock = threading.Lock()
_provider: Callable[[], Settings] = from_mapping
_cached: Settings | None = None


def get_settings() -> Settings:
    """The current settings, built on first use and then cached."""
    global _cached
    settings = _cached
    if settings is None:
        with _lock:
            if _cached is None:
                _cached = _provider()
            settings = _cached
    return settings


def set_provider(provider: Callable[[], Settings]) -> None:
    """Make ``provider`` the source of settings (and forget the cached ones)."""
    global _provider
    with _lock:
        _provider = provider
    reset()


def reset() -> None:
    """Forget the cached settings, e.g. after a test changed them."""
    global _cached
    with _lock:
        _cached = None
