"""Lines the jobs of the end-to-end tests append to a file their test reads."""

from __future__ import annotations

import os


def append_line(path: str, line: str) -> None:
    """Append ``line`` and a newline to ``path`` in one write on an O_APPEND descriptor:
    lines from concurrent workers never interleave."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)
