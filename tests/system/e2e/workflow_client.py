"""A Django process that sends, waits for or cancels a workflow, as an application would.

Commands: ``send SCENARIO LOG GATE`` (prints the workflow id), ``run SCENARIO LOG
GATE`` (sends it, prints ``{"id", "result"}`` or ``"error"`` once it is over),
``wait ID [TIMEOUT]``, ``cancel ID``, ``admin ID`` (the workflow's admin page);
``serve`` reads commands as JSON lists, one a line, and answers each on a line
(Django starts once for many commands). Run with
``DJANGO_SETTINGS_MODULE=tests.system.e2e.workflow_settings`` and ``EMQ_BROKER_ADDR``.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def plan(scenario: str, log: str, gate: str) -> Any:
    from django_eventmq import chain, chord, group
    from tests.system.e2e import workflow_jobs as wj

    if scenario == "chain3":
        return chain(wj.add.s(1, 2, log=log), wj.double.s(log=log), wj.double.s(log=log))
    if scenario == "group5":
        return group(wj.add.s(i, 10, log=log) for i in range(5))
    if scenario == "chord":
        return chord(group(wj.add.s(i, i, log=log) for i in range(4)), wj.total.s(log=log))
    if scenario == "chain20":  # for timing (not a test)
        return chain(wj.add.s(0, 1), *[wj.double.s() for _ in range(19)])
    if scenario == "group50":  # for timing (not a test)
        return group(wj.add.s(i, 1) for i in range(50))
    if scenario == "chord8":
        return chord(group(wj.add.s(i, i, log=log) for i in range(8)), wj.total.s(log=log))
    if scenario == "failing":
        return chain(
            wj.add.s(1, 2, log=log), wj.boom.s(log=log).set(retry_count=1), wj.double.s(log=log)
        )
    if scenario == "picky":  # retry_count=2, but retried for a KeyError only
        return chain(wj.add.s(1, 2, log=log), wj.picky.s(log=log), wj.double.s(log=log))
    if scenario == "gated_chain":  # the second member waits for the gate
        return chain(
            wj.add.s(1, 2, log=log),
            wj.gated.s(gate, log, "b"),
            wj.double.s(log=log),
        )
    if scenario == "gated_chord":  # member 1 of the group waits for the gate
        return chord(
            group(
                wj.add.s(1, 1, log=log),
                wj.gated.s(5, gate, log, "m1"),
                wj.add.s(2, 2, log=log),
            ),
            wj.total.s(log=log),
        )
    raise SystemExit(f"unknown scenario {scenario}")


_ADMIN: list[Any] = []


def admin_page(workflow_id: str) -> dict[str, Any]:
    """The workflow's admin page as a logged-in superuser sees it: status code and HTML."""
    from django_eventmq.models import Workflow
    from tests.django.results.admin_page import staff_client

    if not _ADMIN:
        _ADMIN.append(staff_client())
    row = Workflow.objects.get(workflow_id=workflow_id)
    response = _ADMIN[0].get(f"/admin/django_eventmq/workflow/{row.pk}/change/")
    return {"status": response.status_code, "html": response.content.decode()}


def main(argv: list[str]) -> Any:
    import django
    from django.apps import apps

    if not apps.ready:
        django.setup()
    from django_eventmq import WorkflowHandle
    from django_eventmq.errors import EventMQError

    command = argv[0]
    if command == "send":
        return plan(argv[1], argv[2], argv[3]).delay()
    if command == "run":  # send, then wait
        handle = plan(argv[1], argv[2], argv[3]).delay()
        try:
            return {"id": handle, "result": handle.wait(timeout=60)}
        except EventMQError as exc:
            return {"id": handle, "error": type(exc).__name__, "message": str(exc)}
    if command == "admin":
        return admin_page(argv[1])
    handle = WorkflowHandle(argv[1])
    if command == "cancel":
        handle.cancel()
        return handle.status
    try:
        return {"result": handle.wait(timeout=float(argv[2]) if len(argv) > 2 else 60)}
    except EventMQError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}


def serve() -> None:
    """One command per line (a JSON list of strings) on stdin, one JSON answer per line."""
    for line in sys.stdin:
        print(json.dumps(main(json.loads(line))), flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        serve()
    else:
        print(json.dumps(main(sys.argv[1:])))
