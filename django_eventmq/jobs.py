"""Jobs of the app itself, registered in every process by the app's ``jobs`` discovery.

:func:`run_workflow_step` runs one member of a workflow (:mod:`.workflow_steps`);
clients send it under this name (``client/workflows.py: RUNNER``), so it must
not move without an alias in ``runtime/registry.py: ALIASES``.
"""

from __future__ import annotations

from typing import Any

from django_eventmq.client.jobs import job


@job
def run_workflow_step(
    name: str, args: list[Any], kwargs: dict[str, Any], place: dict[str, Any]
) -> Any:
    """Run the workflow member ``name(*args, **kwargs)`` at ``place`` and pass its result on."""
    from django_eventmq.workflow_steps import run_step

    return run_step(name, args, kwargs, place)
