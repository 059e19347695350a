"""The job the throughput benchmark runs: it does nothing, so only the machinery is measured."""

from __future__ import annotations

from typing import Any

from django_eventmq.client.jobs import job


@job
def noop(*args: Any, **kwargs: Any) -> None:
    """Do nothing."""


def ref_noop(*args: Any, **kwargs: Any) -> None:
    """Do nothing (a plain function for the reference job manager, which imports any path)."""
