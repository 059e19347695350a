"""Dead letters: sending them again, and the router's poisoned jobs (the web side).

Two kinds of job will not run again by themselves:

- a job whose last attempt failed or timed out: its job manager records a
  ``failed``/``timed_out`` results row, and
  :func:`~django_eventmq.dead_letter_recording.record_dead` (called by
  :func:`django_eventmq.result_recording.record_results`, in the worker) keeps a
  :class:`DeadLetter` beside it, which stays when the results row is purged;
- a job whose worker died ``POISON_AFTER`` times: the router set it aside as
  poisoned in its journal (there is no database there). :func:`read_poisoned`
  lists them over the routers' admin sockets, :func:`act_on_poisoned` asks a
  router to hand them out again (deaths reset) or delete them.

:func:`retry` sends dead letters again with a new msgid; the dead letter keeps
that msgid, and a new dead letter of it names the one it came from.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

from django.db.models import Count
from django.utils import timezone
from django.utils.module_loading import import_string

from django_eventmq.cli import status, status_command, status_groups
from django_eventmq.client.jobs import Job
from django_eventmq.client.pool import get_client
from django_eventmq.errors import ConfigurationError, EventMQError, InvalidJob
from django_eventmq.models.dead_letters import DeadLetter, DeadLetterReason
from django_eventmq.models.results import JobResult
from django_eventmq.protocol import EMPTY_HEADERS, new_msgid, parse_job
from django_eventmq.protocol import constants as C
from django_eventmq.protocol.headers import Headers
from django_eventmq.runtime import admin_client
from django_eventmq.runtime.config import get_settings

logger = logging.getLogger("django_eventmq.dead_letters")

#: Seconds each router has to answer while the admin page lists its poisoned jobs.
ROUTER_TIMEOUT = 1.0
#: Header fields a dead letter's ``headers`` may set on its retry.
_HEADER_FIELDS = frozenset(f.name for f in fields(Headers)) - {"extra", "delay_until", "expires"}


def count_line() -> str:
    """``emq_status``'s line about the results table's dead letters (by reason)."""
    counts = dict(
        DeadLetter.objects.values_list("reason").annotate(n=Count("pk")).values_list("reason", "n")
    )
    total = sum(counts.values())
    parts = ", ".join(f"{n} {DeadLetterReason(r).label}" for r, n in sorted(counts.items()) if n)
    return f"dead letters: {total}" + (f" ({parts})" if parts else "") + " in the results table"


# -- sending again ----------------------------------------------------------------------------
def job_headers(path: str) -> Headers:
    """The headers the ``@job`` at ``path`` sends with (its decorator's options); plain
    headers when ``path`` names no such job here."""
    try:
        found = import_string(path)
    except ImportError:
        return EMPTY_HEADERS
    return found.headers if isinstance(found, Job) else EMPTY_HEADERS


def retry_headers(options: Mapping[str, Any], path: str = "") -> Headers:
    """The headers of a dead letter's retry: the job's ``@job`` options, the letter's
    recorded ones over them (those a retry may reuse: not a delay or an expiry that has
    passed), and a reply requested, so that it is recorded again."""
    kept = {name: value for name, value in options.items() if name in _HEADER_FIELDS}
    return job_headers(path).with_(**{**kept, "reply_requested": True})


def retry(letters: Sequence[DeadLetter]) -> list[str]:
    """Send each dead letter again with a new msgid; the msgids sent, in order.

    Each letter keeps the msgid its retry was sent with (``retried_msgid``). Raises
    :class:`EventMQError` when the router cannot be reached (letters sent before
    that are recorded) and :class:`InvalidJob` for a letter that names no job.
    """
    from django_eventmq.admin.results import _body_for  # the results admin's retry body

    settings = get_settings()
    client = get_client(settings.broker_addr, send_timeout=settings.send_timeout)
    sent: list[str] = []
    for letter in letters:
        msgid = new_msgid()
        body = _body_for(JobResult(job=letter.job, args=letter.args, kwargs=letter.kwargs), msgid)
        if body is None:
            raise InvalidJob(f"dead letter {letter.msgid} names no job (job {letter.job!r})")
        client.request(
            letter.queue or C.DEFAULT_QUEUE_NAME,
            body.encode(),
            retry_headers(letter.headers, letter.job),
            msgid,
        )
        DeadLetter.objects.filter(pk=letter.pk).update(
            retried=timezone.now(), retried_msgid=msgid, retries=letter.retries + 1
        )
        sent.append(msgid)
    return sent


# -- the routers' poisoned jobs ---------------------------------------------------------------
@dataclass
class Poisoned:
    """One job a router set aside as poisoned, as the admin page shows it."""

    router: str
    msgid: str
    queue: str
    job: str
    args: list[Any]
    kwargs: dict[str, Any]
    deaths: int
    reason: str
    headers: str
    body: str
    #: When the router accepted it (None: a router that does not say).
    accepted: datetime | None = None


@dataclass
class RouterPoisoned:
    """The poisoned jobs the routers listed, how many they hold, and who did not answer."""

    jobs: list[Poisoned] = field(default_factory=list)
    total: int = 0
    errors: list[str] = field(default_factory=list)


def router_addresses() -> list[str]:
    """The admin addresses to ask: every member of every router group (a standby lists
    none), else the one router (STATUS_ADMIN_ADDRS, else ADMIN_ADDR)."""
    settings = get_settings()
    target = status_command.admin_targets(None, settings.admin_addr, settings)
    groups = status_groups.admin_groups(target, "STATUS_ADMIN_ADDRS")
    if groups is None:
        return [status.connectable(target)]
    return [addr for members in groups for addr in members]


def _when(stamp: Any) -> datetime | None:
    return datetime.fromtimestamp(stamp, tz=UTC) if isinstance(stamp, int | float) else None


def _poisoned(addr: str, item: Mapping[str, Any]) -> Poisoned:
    body = str(item.get("job", ""))
    try:
        parsed = parse_job(body)
        name, args, kwargs = parsed.name, list(parsed.args), dict(parsed.kwargs)
    except InvalidJob:
        name, args, kwargs = "?", [], {}
    return Poisoned(
        router=addr,
        msgid=str(item.get("msgid", "")),
        queue=str(item.get("queue", "")),
        job=name,
        args=args,
        kwargs=kwargs,
        deaths=int(item.get("deaths", 0)),
        reason=str(item.get("reason", "")),
        headers=str(item.get("headers", "")),
        body=body,
        accepted=_when(item.get("accepted")),
    )


def read_poisoned(timeout: float | None = None) -> RouterPoisoned:
    """Every router's poisoned jobs (each lists its first 100); a router that cannot be
    asked is an error line, not an exception."""
    found = RouterPoisoned()
    try:
        addresses = router_addresses()
    except ConfigurationError as exc:
        found.errors.append(str(exc))
        return found
    for addr in addresses:
        try:
            listed, total = admin_client.poisoned_jobs(addr, timeout or ROUTER_TIMEOUT)
        except EventMQError as exc:
            found.errors.append(f"router {addr}: {exc}")
            continue
        found.jobs += [_poisoned(addr, item) for item in listed]
        found.total += total
    return found


def act_on_poisoned(command: str, chosen: Iterable[tuple[str, str]]) -> list[str]:
    """POISONED_RETRY or POISONED_PURGE the ``(router, msgid)`` pairs chosen, one message
    per router; the msgids the routers acted on. Raises :class:`EventMQError`."""
    by_router: dict[str, list[str]] = {}
    for addr, msgid in chosen:
        by_router.setdefault(addr, []).append(msgid)
    known = set(router_addresses())
    done: list[str] = []
    for addr, msgids in by_router.items():
        if addr not in known:  # only the routers this site is set up to administer
            raise ConfigurationError(f"{addr} is not one of this site's routers ({sorted(known)})")
        done += admin_client.act_on_poisoned(addr, command, msgids, ROUTER_TIMEOUT * 5)
    return done
