"""A job module that raises as it is imported: the worker processes that load it
cannot start (the job manager's own process never imports it)."""

from __future__ import annotations

raise RuntimeError("this job module is broken on purpose")
