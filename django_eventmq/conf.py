"""Settings from Django: the only module that reads ``django.conf.settings``.

:func:`get_settings` builds the core :class:`~django_eventmq.runtime.settings.Settings`
from ``settings.EVENTMQ`` (a dict whose keys are the upper-cased field names)
and ``EMQ_*`` environment variables, which win. The app installs it as the
core settings provider in ``AppConfig.ready()``; core caches the result until
:func:`reset` (called when ``EVENTMQ`` changes, e.g. under ``override_settings``).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from django.conf import settings as django_settings

from django_eventmq.cli.options import settings_from_options
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
    """Build settings from ``settings.EVENTMQ`` and ``EMQ_*`` (uncached: core caches)."""
    return from_mapping(raw_settings())


def debug() -> bool:
    """Django's ``DEBUG``."""
    return bool(getattr(django_settings, "DEBUG", False))


def settings_with_options(options: argparse.Namespace | Mapping[str, Any]) -> Settings:
    """The current settings with a command's options applied (``OptionError`` if bad)."""
    return settings_from_options(config.get_settings(), options)


def reset() -> None:
    """Forget the cached settings; the next use rebuilds them."""
    config.reset()


def on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    """``setting_changed`` receiver: rebuild our settings when ``EVENTMQ`` changed."""
    if setting == SETTING_NAME:
        reset()
