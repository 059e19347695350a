"""System checks for the ``EVENTMQ`` setting and ``EMQ_*`` environment variables.

Stable ids (``python manage.py check`` shows them; silence with
``SILENCED_SYSTEM_CHECKS``):

- ``django_eventmq.E001`` a setting has an invalid value (or is unknown)
- ``django_eventmq.E002`` ``QUEUES`` cannot be parsed or names a bad queue
- ``django_eventmq.E003`` an ``*_ADDR`` setting is not a ZeroMQ address
- ``django_eventmq.E004`` a ``JOB_MODULES`` entry cannot be imported
- ``django_eventmq.E005`` ``JOURNAL_URL`` names a ``DATABASES`` entry that is not PostgreSQL
- ``django_eventmq.W001`` ``EAGER`` is on while ``DEBUG`` is off
- ``django_eventmq.W002`` ``BROKER_ADDR`` is empty while ``DEBUG`` is off
- ``django_eventmq.E010`` ``TASKS`` uses our backend but ``django_eventmq`` is not
  in ``INSTALLED_APPS`` (``EventMQBackend.check``, run by Django's tasks check)
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Sequence
from typing import Any

from django.core import checks

from django_eventmq import conf
from django_eventmq.errors import ConfigurationError
from django_eventmq.runtime.settings import (
    ENV_PREFIX,
    KNOWN_KEYS,
    Settings,
    from_mapping,
    unknown_settings_message,
)

TAG = "eventmq"

_WHERE = "settings.EVENTMQ or the EMQ_* environment variables"


def register_checks() -> None:
    """Register our checks (idempotent: the registry keeps a set)."""
    checks.register(check_settings, TAG)


def _sources() -> tuple[dict[str, Any], dict[str, str], list[checks.CheckMessage]]:
    """The raw EVENTMQ mapping and EMQ_* variables, or an error if EVENTMQ is not a dict."""
    env = {key: value for key, value in os.environ.items() if key.startswith(ENV_PREFIX)}
    try:
        return conf.raw_settings(), env, []
    except ConfigurationError as exc:
        return {}, env, [_error("E001", exc, "Set EVENTMQ to a dict, or remove it.")]


def _error(code: str, exc: Exception | str, hint: str) -> checks.Error:
    return checks.Error(str(exc), hint=hint, id=f"django_eventmq.{code}")


def check_settings(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[Any]:
    """Every check of ours, in one pass over the settings."""
    mapping, env, errors = _sources()
    errors.extend(_resolve_journal_alias(mapping, env))
    # Queues and addresses are checked one key at a time so each gets its own
    # id; the keys that failed are left out of the full build below, which
    # then reports only the other problems (E001).
    bad: set[str] = set()
    for key, value in _items(mapping, env):
        if key not in KNOWN_KEYS:
            # EVENTMQ keys are reported all at once by the full build below, which
            # reads only the EMQ_* variables it knows: a mistyped address variable
            # (other EMQ_* names are left to other tools) is reported here.
            if key not in mapping and key.endswith("_ADDR"):
                where = f"(from environment variable {ENV_PREFIX}{key})"
                message = f"{unknown_settings_message([key])} {where}"
                errors.append(_error("E001", message, f"Rename or unset {ENV_PREFIX}{key}."))
            continue
        if key == "QUEUES":
            code, hint = "E002", "Use 'name:weight,...', e.g. 'email:30,default:10'."
        elif key.endswith("_ADDR"):
            code = "E003"
            hint = "Use an address such as 'tcp://127.0.0.1:47291' or 'ipc:///run/eventmq.sock'" + (
                " (BROKER_ADDR may be '' to run jobs inline)." if key == "BROKER_ADDR" else "."
            )
        else:
            continue
        try:
            from_mapping({key: value}, environ={})
        except ConfigurationError as exc:
            errors.append(_error(code, f"{exc} (from {_origin(key, mapping, env)})", hint))
            bad.add(key)
    try:
        settings = from_mapping(
            {k: v for k, v in mapping.items() if k not in bad},
            environ={k: v for k, v in env.items() if k.removeprefix(ENV_PREFIX) not in bad},
        )
    except ConfigurationError as exc:
        errors.append(_error("E001", exc, f"Fix the value in {_WHERE}."))
        return errors
    errors.extend(_check_job_modules(settings.job_modules))
    errors.extend(_check_inline(settings))
    return errors


def _resolve_journal_alias(mapping: dict[str, Any], env: dict[str, str]) -> list[Any]:
    """A JOURNAL_URL naming a DATABASES alias becomes its URL (as conf does), in place."""
    for source in (mapping, env):
        key = "JOURNAL_URL" if source is mapping else ENV_PREFIX + "JOURNAL_URL"
        alias = source.get(key)
        if not isinstance(alias, str) or alias not in conf.databases():
            continue
        try:
            source[key] = conf.database_url(alias, "JOURNAL_URL")
        except ConfigurationError as exc:
            del source[key]
            return [_error("E005", exc, "Name a PostgreSQL entry of DATABASES, or give a URL.")]
    return []


def _items(mapping: dict[str, Any], env: dict[str, str]) -> Iterable[tuple[str, Any]]:
    """(KEY, value) of every setting given, the environment winning."""
    merged: dict[str, Any] = dict(mapping)
    merged.update({key.removeprefix(ENV_PREFIX): value for key, value in env.items()})
    return merged.items()


def _origin(key: str, mapping: dict[str, Any], env: dict[str, str]) -> str:
    return f"environment variable {ENV_PREFIX}{key}" if ENV_PREFIX + key in env else "EVENTMQ"


def _check_job_modules(modules: Iterable[str]) -> list[checks.CheckMessage]:
    errors: list[checks.CheckMessage] = []
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:  # any import-time failure stops a job manager
            errors.append(
                _error(
                    "E004",
                    f"JOB_MODULES entry {module!r} cannot be imported: {exc!r}",
                    "Fix the module, or remove it from JOB_MODULES (apps' jobs.py modules "
                    "are found without being listed).",
                )
            )
    return errors


def _check_inline(settings: Settings) -> list[checks.CheckMessage]:
    if conf.debug():
        return []
    if settings.eager:
        return [
            checks.Warning(
                "EVENTMQ EAGER is on while DEBUG is off: .delay() runs every job inline, "
                "inside the web request, instead of sending it to the router.",
                hint="Set EAGER to False in production (it is meant for tests and development).",
                id="django_eventmq.W001",
            )
        ]
    if not settings.broker_addr:
        return [
            checks.Warning(
                "EVENTMQ BROKER_ADDR is empty while DEBUG is off: .delay() runs every job "
                "inline, inside the web request.",
                hint="Set BROKER_ADDR to the router's frontend, e.g. 'tcp://127.0.0.1:47291'.",
                id="django_eventmq.W002",
            )
        ]
    return []
