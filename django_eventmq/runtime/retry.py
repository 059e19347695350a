"""Retry policy shared by the router (a job handed out again) and the job manager (a failed job)."""

from __future__ import annotations


def backoff(attempt: int, base: float, cap: float) -> float:
    """Seconds to wait before running again after attempt ``attempt`` (from 1) failed."""
    return float(min(cap, base * 2 ** (attempt - 1)))
