"""Rate limits on the client: ``@job(rate_limit=, rate_key=)`` become the
``rate-limit`` and ``rate-key`` headers, fixed for the job (the router counts
hand-outs under the key; docs/rate-limits.md). Read once, at ``@job``
(:mod:`.stages`, "options").
"""

from __future__ import annotations

from typing import Any

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import headers as headers_mod


def rate_headers(name: str, rate: str | int | None, key: str | None) -> tuple[str, ...]:
    """The ``rate-limit`` and ``rate-key`` headers of ``@job(rate_limit=, rate_key=)``
    (key: the job's dotted name unless given); :class:`ProtocolError` if not valid."""
    if rate is None:
        if key is not None:
            raise ProtocolError("rate_key= needs rate_limit= too, e.g. rate_limit='100/m'")
        return ()
    if key is not None and (not isinstance(key, str) or not key or "," in key):
        raise ProtocolError(f"rate_key= must be a non-empty string without commas, got {key!r}")
    return (
        f"{headers_mod.RATE_LIMIT}:{headers_mod.parse_rate(rate).text}",
        f"{headers_mod.RATE_KEY}:{name if key is None else key.strip()}",
    )


def from_options(name: str, fields: dict[str, Any]) -> tuple[str, ...]:
    """The fixed headers of job ``name``'s rate limit (none: ``()``); takes
    ``rate_limit`` and ``rate_key`` out of ``fields``."""
    return rate_headers(name, fields.pop("rate_limit", None), fields.pop("rate_key", None))
