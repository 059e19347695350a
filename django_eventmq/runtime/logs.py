"""Structured fields on the log lines about one job: ``msgid``, ``queue``, ``job``.

Lines about a job carry them twice: in the text (``msgid=... queue=...``,
readable as is) and as attributes of the log record (``extra=``), so a
formatter or a JSON handler can use them to follow one job across the
client (Django), the router and the job manager. The router never parses job
bodies, so its lines have no ``job``.

:class:`JobFields` gives every record the three attributes (empty when a line
is not about a job), so a format string such as ``%(msgid)s`` works for all
lines. Never imports Django.
"""

from __future__ import annotations

import json
import logging

#: The attributes a line about a job carries.
FIELDS = ("msgid", "queue", "job")


def job_fields(msgid: str, queue: str, job: str = "") -> dict[str, str]:
    """The ``extra=`` of a line about one job."""
    return {"msgid": msgid, "queue": queue, "job": job}


def job_name(body_text: str) -> str:
    """``path.callable`` of a job body, or ``?`` when it is not one."""
    try:
        spec = json.loads(body_text)[1]
        return f"{spec['path']}.{spec['callable']}"
    except Exception:
        return "?"


class JobFields(logging.Filter):
    """Adds ``msgid``, ``queue`` and ``job`` (empty) to records that lack them.

    Put it on a handler whose format names the fields, e.g.
    ``"filters": {"emq": {"()": "django_eventmq.runtime.logs.JobFields"}}`` in
    Django's ``LOGGING``.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        for name in FIELDS:
            if not hasattr(record, name):
                setattr(record, name, "")
        return True


def job_debug(
    logger: logging.Logger,
    what: str,
    msgid: str,
    queue: str,
    *args: object,
    job: str = "",
    body: str = "",
) -> None:
    """DEBUG ``job <what % args> msgid=... queue=... [job=...]`` with the fields as attributes.

    ``body``: a job body to take the job's name from. Costs one level check
    when DEBUG is off (it is on hot paths).
    """
    if logger.isEnabledFor(logging.DEBUG):
        if body and not job:
            job = job_name(body)
        text = "job " + what + " msgid=%s queue=%s" + (" job=%s" if job else "")
        logger.debug(
            text,
            *args,
            msgid,
            queue,
            *((job,) if job else ()),
            extra=job_fields(msgid, queue, job),
            stacklevel=2,
        )
