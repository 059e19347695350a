"""A progress bar for commands that run long: redrawn in place on a terminal, silent elsewhere.

::

    with ProgressBar(self.stdout, total, label="results deleted") as progress:
        for chunk in chunks:
            ...
            progress.advance(len(chunk))
    self.stdout.write("deleted ...")  # the plain final line, terminal or not

On a terminal (``stream.isatty()``) :meth:`ProgressBar.update` redraws
``\\r[#########.....................]  30% 3,000/10,000 results deleted`` at
most every :data:`REDRAW_EVERY` seconds, and :meth:`ProgressBar.finish` draws
it one last time and ends the line. Anywhere else (a pipe, a log file, a
test's ``StringIO``) it writes nothing, so logs stay clean and the command's
own final line is the whole record. Never imports Django.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType
from typing import Protocol

#: Characters between the brackets.
BAR_WIDTH = 30
#: Seconds between two redraws (a terminal redrawn for every item is slower than the work).
REDRAW_EVERY = 0.1
#: Erases from the cursor to the end of the line: a shorter redraw leaves no tail.
ERASE_TO_END = "\x1b[K"


class Stream(Protocol):
    """What the bar writes to: a text file, or Django's ``OutputWrapper``."""

    def write(self, text: str, /) -> object: ...

    def flush(self) -> object: ...

    def isatty(self) -> bool: ...


def bar(done: int, total: int | None, width: int = BAR_WIDTH) -> str:
    """``[######......]`` filled in proportion to ``done / total`` (empty if no total)."""
    filled = min(width, width * max(0, done) // total) if total else 0
    return "[" + "#" * filled + "." * (width - filled) + "]"


def redraw(stream: Stream, line: str) -> None:
    """Draw ``line`` over the current terminal line."""
    stream.write("\r" + line + ERASE_TO_END)
    stream.flush()


class ProgressBar:
    """Progress of ``total`` items (None: unknown) on ``stream``, drawn only on a terminal."""

    def __init__(
        self,
        stream: Stream,
        total: int | None,
        *,
        label: str = "",
        every: float = REDRAW_EVERY,
        tty: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        self.total = total
        self.label = label
        self.every = every
        self.tty = _isatty(stream) if tty is None else tty
        self.done = 0
        self.finished = False
        self._clock = clock
        self._next = 0.0

    def line(self) -> str:
        """``[####....]  40% 400/1,000 label`` (no percentage without a total)."""
        if self.total:
            percent = min(100, 100 * self.done // self.total)
            count = f"{percent:3d}% {self.done:,}/{self.total:,}"
        else:
            count = f"{self.done:,}"
        return " ".join(part for part in (bar(self.done, self.total), count, self.label) if part)

    def update(self, done: int, *, force: bool = False) -> None:
        """``done`` items so far; redrawn if on a terminal and the last redraw is old enough."""
        self.done = done
        if not self.tty or self.finished:
            return
        now = self._clock()
        if force or now >= self._next:
            self._next = now + self.every
            redraw(self.stream, self.line())

    def advance(self, n: int = 1) -> None:
        """``n`` more items done."""
        self.update(self.done + n)

    def finish(self) -> None:
        """Draw the bar as it ends and end its line (on a terminal; idempotent)."""
        if self.finished:
            return
        if self.tty:
            redraw(self.stream, self.line())
            self.stream.write("\n")
            self.stream.flush()
        self.finished = True

    def __enter__(self) -> ProgressBar:
        if self.tty:
            redraw(self.stream, self.line())  # the empty bar: the work has started
            self._next = self._clock() + self.every
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.finish()


def _isatty(stream: Stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed file
        return False
