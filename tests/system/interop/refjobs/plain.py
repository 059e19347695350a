"""Plain functions, not registered with ``@job``: run only when the module is allowed."""

from __future__ import annotations

from typing import Any

from .record import append_record


def plain_record(*args: Any, out: str, **kwargs: Any) -> dict[str, Any]:
    """Record the call in ``out`` (see :mod:`.record`)."""
    entry = append_record(out, args, kwargs)
    return {"args": entry["args"], "kwargs": entry["kwargs"]}
