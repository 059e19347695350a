"""``ROUTES``: which queue a job goes to when its ``@job`` names none.

``{"billing.jobs.*": "billing", "app.jobs.send_*": "email"}``: each key is a
glob (:func:`fnmatch.fnmatchcase`: ``*``, ``?``, ``[...]``, case-sensitive)
matched against the job's dotted name (``module.function``); the first that
matches, in the order written, names the queue. No match: ``default``.
``.send(queue=...)`` still wins over both. The setting is read and checked by
:func:`.setting_values.parse_routes`.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from django_eventmq.runtime.setting_values import Routes


def route(name: str, routes: Routes) -> str | None:
    """The queue of the first glob in ``routes`` that matches job ``name`` (None: none)."""
    for pattern, queue in routes:
        if fnmatchcase(name, pattern):
            return queue
    return None
