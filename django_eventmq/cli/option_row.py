"""One command-line option as a row of a table: :class:`Option`, and how rows feed argparse.

The tables themselves, and how given options become settings, are in
:mod:`.options`. Never imports Django.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django_eventmq.errors import ConfigurationError
from django_eventmq.runtime.settings import Settings

#: The built-in settings, for the defaults the help shows.
_DEFAULTS = Settings()


class OptionError(ConfigurationError):
    """A command-line option has a value that cannot work; the message names it."""


# -- the table ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Option:
    """One command-line option: how argparse reads it and which setting it overrides.

    With ``setting`` set, the help gains "(default: the SETTING setting or
    EMQ_SETTING, else VALUE)" and :func:`settings_from_options` applies the
    value; without, the command reads the value itself and ``help`` says the default.
    """

    flags: tuple[str, ...]
    help: str
    setting: str | None = None
    dest: str | None = None
    type: Callable[[str], Any] | None = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    action: str | None = None
    const: Any = None
    default: Any = None
    #: Repeatable: the values are added to the setting's tuple, not put in its place.
    additive: bool = False
    #: Further settings a given value sets too (``--journal PATH`` turns the journal on).
    implies: tuple[tuple[str, Any], ...] = ()
    #: The default the help shows (default: the setting's built-in value).
    shown: str | None = None
    #: Options sharing this key exclude each other.
    exclusive: str | None = None
    #: ``(prefix, setting)``: a value starting with ``prefix`` sets that setting instead
    #: (``--journal postgresql://...`` is JOURNAL_URL, not JOURNAL_PATH).
    redirect: tuple[tuple[str, str], ...] = ()

    def target(self, value: Any) -> str | None:
        """The setting ``value`` goes to (``setting``, unless a ``redirect`` prefix matches)."""
        if isinstance(value, str):
            for prefix, setting in self.redirect:
                if value.startswith(prefix):
                    return setting
        return self.setting

    @property
    def name(self) -> str:
        return self.flags[0]

    @property
    def key(self) -> str:
        """The argparse ``dest``."""
        return self.dest or self.name.lstrip("-").replace("-", "_")

    def full_help(self) -> str:
        if self.setting is None:
            return self.help
        upper = self.setting.upper()
        shown = self.shown if self.shown is not None else getattr(_DEFAULTS, self.setting)
        return f"{self.help} (default: the {upper} setting or EMQ_{upper}, else {shown})"

    def add_to(self, container: Any) -> None:
        kwargs: dict[str, Any] = {"dest": self.key, "help": self.full_help()}
        if self.action is not None:
            kwargs["action"] = self.action
        if self.action == "store_const":
            kwargs["const"] = self.const
        if self.action not in ("store_true", "store_const"):
            for field in ("type", "metavar", "choices"):
                if getattr(self, field) is not None:
                    kwargs[field] = getattr(self, field)
        if self.action != "store_true":
            kwargs["default"] = self.default
        container.add_argument(*self.flags, **kwargs)


def add_options(parser: argparse.ArgumentParser, title: str, options: Iterable[Option]) -> None:
    """Add ``options`` to ``parser`` under the heading ``title``."""
    group = parser.add_argument_group(title)
    exclusive: dict[str, Any] = {}
    for option in options:
        container: Any = group
        if option.exclusive is not None:
            if option.exclusive not in exclusive:
                exclusive[option.exclusive] = group.add_mutually_exclusive_group()
            container = exclusive[option.exclusive]
        option.add_to(container)
