"""A :class:`~django_eventmq.cli.progressbar.ProgressBar` on a management command's stdout."""

from __future__ import annotations

from django.core.management.base import BaseCommand, OutputWrapper

from django_eventmq.cli.progressbar import ProgressBar


class _Unended:
    """``OutputWrapper`` adds a newline to every write; a bar redraws its own line."""

    def __init__(self, out: OutputWrapper) -> None:
        self._out = out

    def write(self, text: str, /) -> None:
        self._out.write(text, ending="")

    def flush(self) -> None:
        self._out.flush()

    def isatty(self) -> bool:
        return self._out.isatty()


def command_progress(
    command: BaseCommand, total: int | None, label: str, *, verbosity: int = 1
) -> ProgressBar:
    """A bar on ``command``'s stdout, drawn if that is a terminal and ``verbosity`` is not 0."""
    bar = ProgressBar(_Unended(command.stdout), total, label=label)
    bar.tty = bar.tty and verbosity > 0
    return bar
