"""Randomly damaged copies of a good frame, for the hot-path readers' tests
(``request_of``, ``done_of``: what they read from a damaged frame, ``unpack``
must read the same)."""

from __future__ import annotations

import random
from collections.abc import Iterator


def damaged(good: bytes, alphabet: bytes, seed: int, count: int = 20000) -> Iterator[bytes]:
    """``count`` copies of ``good``, each with one to three bytes of ``alphabet``
    put in, put over, or taken out at random places (the same ones for ``seed``)."""
    rng = random.Random(seed)
    for _ in range(count):
        frame = bytearray(good)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(frame) + 1)
            op = rng.random()
            if op < 0.4 and at < len(frame):
                frame[at] = rng.choice(alphabet)
            elif op < 0.7:
                frame.insert(at, rng.choice(alphabet))
            elif at < len(frame):
                del frame[at]
        yield bytes(frame)
