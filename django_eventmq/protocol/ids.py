"""Message ids: unique strings, cheap to make.

A random 96-bit prefix per process (made again in a forked child) followed by
a counter: as unique as uuid4 strings for our purposes and ~10x cheaper on
the enqueue hot path. Peers treat ids as opaque text.
"""

from __future__ import annotations

import itertools
import os

_prefix = ""
_counter = itertools.count()


def _reseed() -> None:
    global _prefix, _counter
    _prefix = os.urandom(12).hex()
    _counter = itertools.count(1)


_reseed()
os.register_at_fork(after_in_child=_reseed)


def new_msgid() -> str:
    """A fresh, unique message id."""
    return f"{_prefix}-{next(_counter):x}"
