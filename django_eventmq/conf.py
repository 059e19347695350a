"""Settings from Django: the only module that reads ``django.conf.settings``.

:func:`get_settings` builds the runtime's :class:`~django_eventmq.runtime.settings.Settings`
from ``settings.EVENTMQ`` (a dict whose keys are the upper-cased field names)
and ``EMQ_*`` environment variables, which win. The app installs it as the
runtime's settings provider in ``AppConfig.ready()``; the runtime caches it until
:func:`reset` (called when ``EVENTMQ`` changes, e.g. under ``override_settings``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

from django.conf import settings as django_settings

from django_eventmq.cli.options import OptionError, settings_from_options
from django_eventmq.errors import ConfigurationError
from django_eventmq.runtime import config
from django_eventmq.runtime.settings import Settings, from_mapping

#: The Django setting that holds our settings.
SETTING_NAME = "EVENTMQ"


def raw_settings() -> dict[str, Any]:
    """``settings.EVENTMQ`` as given (keys upper-cased), ``{}`` when absent."""
    value = getattr(django_settings, SETTING_NAME, None)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            f"{SETTING_NAME} must be a dict such as {{'BROKER_ADDR': 'tcp://127.0.0.1:47291'}}, "
            f"got {type(value).__name__}"
        )
    return {str(key).upper(): item for key, item in value.items()}


def get_settings() -> Settings:
    """Build settings from ``settings.EVENTMQ`` and ``EMQ_*`` (uncached: the runtime caches).

    A ``JOURNAL_URL`` that names a ``DATABASES`` alias becomes that database's URL.
    """
    raw = raw_settings()
    environ = dict(os.environ)
    for source, key in ((raw, "JOURNAL_URL"), (environ, "EMQ_JOURNAL_URL")):
        alias = source.get(key)
        if isinstance(alias, str) and alias in databases():
            source[key] = database_url(alias, key)
    return from_mapping(raw, environ=environ)


def databases() -> Mapping[str, Any]:
    """Django's ``DATABASES`` ({} when absent)."""
    value = getattr(django_settings, "DATABASES", None)
    return value if isinstance(value, Mapping) else {}


def database_url(alias: str, where: str = "--journal") -> str:
    """The libpq URL of the PostgreSQL database ``DATABASES[alias]`` (for a router group's
    journal); a ``ConfigurationError`` naming ``where`` if it is not PostgreSQL."""
    db = databases().get(alias)
    if not isinstance(db, Mapping):
        raise ConfigurationError(f"{where}: DATABASES has no entry {alias!r}")
    engine = str(db.get("ENGINE", ""))
    if "postgresql" not in engine and "postgis" not in engine:
        raise ConfigurationError(
            f"{where}: DATABASES[{alias!r}] uses {engine or 'no ENGINE'}, not PostgreSQL; a "
            "router group's journal needs PostgreSQL: name a PostgreSQL alias, or give a "
            "postgresql://user@host:5432/db URL"
        )
    user = quote(str(db.get("USER") or ""), safe="")
    password = str(db.get("PASSWORD") or "")
    auth = f"{user}:{quote(password, safe='')}@" if password else (f"{user}@" if user else "")
    host = str(db.get("HOST") or "")
    query: dict[str, str] = {}
    if host.startswith("/"):  # a Unix socket directory goes in the query
        query["host"], host = host, ""
    elif ":" in host:
        host = f"[{host}]"  # IPv6
    port = f":{db['PORT']}" if db.get("PORT") else ""
    options = db.get("OPTIONS") or {}
    if isinstance(options, Mapping):
        query.update(
            {str(k): str(v) for k, v in options.items() if isinstance(v, str | int | float)}
        )
    name = quote(str(db.get("NAME") or ""), safe="")
    tail = f"?{urlencode(query)}" if query else ""
    return f"postgresql://{auth}{host}{port}/{name}{tail}"


def debug() -> bool:
    """Django's ``DEBUG``."""
    return bool(getattr(django_settings, "DEBUG", False))


def settings_with_options(options: argparse.Namespace | Mapping[str, Any]) -> Settings:
    """The current settings with a command's options applied (``OptionError`` if bad).

    ``--journal NAME`` naming a ``DATABASES`` alias means that database's URL.
    """
    values = dict(vars(options) if isinstance(options, argparse.Namespace) else options)
    journal = values.get("journal_path")
    if isinstance(journal, str) and journal in databases():
        try:
            values["journal_path"] = database_url(journal)
        except ConfigurationError as exc:
            raise OptionError(str(exc)) from None
    return settings_from_options(config.get_settings(), values)


def reset() -> None:
    """Forget the cached settings; the next use rebuilds them."""
    config.reset()


def on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    """``setting_changed`` receiver: rebuild our settings when ``EVENTMQ`` changed."""
    if setting == SETTING_NAME:
        reset()
