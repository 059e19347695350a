"""docs/migrating.md names only what django-eventmq has: every ``@job(...)`` keyword,
setting, command and command option, signal, import, and method called on a job, a
handle or ``current_job()`` is checked against the code, so the guide cannot drift."""

from __future__ import annotations

import dataclasses
import importlib
import re
from functools import cache

from django.core.management import load_command_class

from django_eventmq import signals
from django_eventmq.client.handles import JobHandle
from django_eventmq.client.job_headers import JobOptions
from django_eventmq.client.jobs import Job
from django_eventmq.runtime.job_context import JobContext
from django_eventmq.runtime.settings import KNOWN_KEYS
from tests.support import ROOT

GUIDE = ROOT / "docs" / "migrating.md"
#: What ``@job(...)`` takes besides its :class:`JobOptions`.
JOB_KEYWORDS = {"queue", "schedule", "cron"} | set(JobOptions.__optional_keys__)
#: The column of a mapping table that names ours.
OURS = "django-eventmq"


def blocks(text: str) -> list[str]:
    """The fenced code blocks of ``text``."""
    return re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)


def cells(line: str) -> list[str]:
    """The cells of a table row (``\\|`` is a ``|`` inside a cell)."""
    parts = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [part.strip() for part in parts]


def ours(text: str) -> str:
    """``text`` with each table row cut to its django-eventmq cell: what the guide says
    of ours, not of the other libraries."""
    kept, column = [], None
    for line in text.splitlines():
        if not line.startswith("|"):
            column = None
            kept.append(line)
            continue
        row = cells(line)
        if column is None:
            column = next((i for i, c in enumerate(row) if c.startswith(OURS)), -1)
        kept.append(row[column] if column >= 0 and len(row) > column else "")
    return "\n".join(kept)


def our_cells(text: str) -> list[str]:
    """Every cell of every table's django-eventmq column."""
    found, column = [], None
    for line in text.splitlines():
        if not line.startswith("|"):
            column = None
            continue
        row = cells(line)
        if column is None:
            column = next((i for i, c in enumerate(row) if c.startswith(OURS)), -1)
        elif column >= 0 and not set(line) <= set("|- "):
            found.append(row[column])
    return found


def keywords(call: str) -> list[str]:
    """The keyword names of a call's arguments at its top level: ``a=(1, 2), b=f(c=3)``
    gives ``a`` and ``b``."""
    names, depth, start = [], 0, 0
    for i, char in enumerate(call + ","):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            match = re.match(r"\s*(\w+)\s*=(?!=)", call[start:i])
            if match:
                names.append(match.group(1))
            start = i + 1
    return names


def calls(text: str, opening: str) -> list[str]:
    """The text inside each bracket that ``opening`` (a pattern ending in ``(`` or
    ``{``) opens, to the one that closes it (or the end of the text, for ``(...``)."""
    found = []
    for match in re.finditer(opening, text):
        bracket = text[match.end() - 1]
        pair = {bracket: 1, {"(": ")", "{": "}"}[bracket]: -1}
        depth, i = 1, match.end()
        while i < len(text) and depth:
            depth += pair.get(text[i], 0)
            i += 1
        found.append(text[match.end() : i - 1 if not depth else i])
    return found


def wrong_job_keywords(text: str) -> list[str]:
    return sorted(
        {
            name
            for args in calls(ours(text), r"(?<![\w.])@job\(")
            for name in keywords(args)
            if name not in JOB_KEYWORDS
        }
    )


def named_settings(text: str) -> set[str]:
    """``EVENTMQ["X"]``, the keys of ``EVENTMQ = {...}`` and every setting-like name in
    backticks in a django-eventmq cell."""
    names = set(re.findall(r"""EVENTMQ\[["']([A-Z0-9_]+)["']\]""", text))
    for literal in calls(text, r"EVENTMQ = \{"):
        names |= set(re.findall(r"""["']([A-Z0-9_]+)["']\s*:""", literal))
    for cell in our_cells(text):
        names |= set(re.findall(r"`([A-Z][A-Z0-9_]{2,})`", cell))
    return names


@cache
def command_options(name: str) -> frozenset[str] | None:
    """The option strings of management command ``name`` (None: no such command)."""
    try:
        command = load_command_class("django_eventmq", name)
    except ModuleNotFoundError:
        return None
    return frozenset(command.create_parser("manage.py", name)._option_string_actions)


def wrong_commands(text: str) -> list[str]:
    """``emq_x`` commands that do not exist, and ``--options`` written after one (in
    the same code span or line) that it does not take."""
    wrong = []
    pieces = re.findall(r"`([^`\n]+)`", text) + [
        line for block in blocks(text) for line in block.splitlines()
    ]
    for piece in pieces:
        for match in re.finditer(r"\b(emq_\w+)((?:[ ,]+(?:--[\w-]+|[^\s#`-][^\s#`]*))*)", piece):
            name, rest = match.groups()
            options = command_options(name)
            if options is None:
                wrong.append(f"{name}: no such command")
                continue
            wrong += [f"{name} {o}" for o in re.findall(r"--[\w-]+", rest) if o not in options]
    return sorted(set(wrong))


def wrong_attributes(text: str) -> list[str]:
    """Methods and fields used on a job (``job.x``), a handle (``handle.x``,
    ``JobHandle(msgid).x``) and ``current_job().x`` that do not exist."""
    text = ours(text)
    owners = {r"\bjob": Job, r"\bhandle": JobHandle, r"JobHandle\(msgid\)": JobHandle}
    wrong = [
        f"{owner.__name__}.{name}"
        for pattern, owner in owners.items()
        for name in re.findall(pattern + r"\.(\w+)", text)
        if not hasattr(owner, name)
    ]
    fields = {f.name for f in dataclasses.fields(JobContext)}
    wrong += [
        f"current_job().{name}"
        for name in re.findall(r"current_job\(\)\.(\w+)", text)
        if name not in fields
    ]
    return sorted(set(wrong))


def wrong_imports(text: str) -> list[str]:
    """Names a ``from django_eventmq... import ...`` line, or a phrase ``X`` (from
    ``django_eventmq...``), says are there and are not."""
    wrong = []
    found = re.findall(r"^from (django_eventmq[\w.]*) import ([\w, ]+)$", text, re.M)
    found += [
        (module, name)
        for name, module in re.findall(r"`(\w+)(?:\([^`]*\))?` from `(django_eventmq[\w.]*)`", text)
    ]
    found += [
        ("django_eventmq", name) for name in re.findall(r"`(\w+)` \(from `django_eventmq`\)", text)
    ]
    for module, names in found:
        loaded = importlib.import_module(module)
        wrong += [
            f"{module}.{n.strip()}" for n in names.split(",") if not hasattr(loaded, n.strip())
        ]
    return sorted(set(wrong))


def wrong_signals(text: str) -> list[str]:
    return sorted(
        {
            name
            for cell in our_cells(text)
            for name in re.findall(r"`(job_\w+)`", cell)
            if not hasattr(signals, name)
        }
    )


def test_every_job_option_the_guide_writes_is_one_job_takes():
    text = GUIDE.read_text()
    assert len(calls(text, r"(?<![\w.])@job\(")) > 40
    assert wrong_job_keywords(text) == []


def test_every_setting_the_guide_names_exists():
    names = named_settings(GUIDE.read_text())
    assert {"ROUTES", "RESULT_EXPIRES", "PREFETCH_BUDGET", "EAGER", "OUTBOX"} <= names
    assert sorted(names - KNOWN_KEYS) == []


def test_every_command_and_option_the_guide_names_exists():
    text = GUIDE.read_text()
    assert "emq_status --jobs" in text and "--autoscale 2,8" in text
    assert wrong_commands(text) == []


def test_every_method_signal_and_import_the_guide_names_exists():
    text = GUIDE.read_text()
    for used in ("job.adelay(", "handle.aresult(", "current_job().msgid", "job_retrying"):
        assert used in text, used
    assert wrong_attributes(text) == []
    assert wrong_signals(text) == []
    assert wrong_imports(text) == []


def test_the_guide_checks_can_fail():
    page = (
        "| Celery | django-eventmq |\n| --- | --- |\n"
        "| `max_retries=3` | `@job(retries=3, retry_on=(A, B),"
        " schedule=crontab('x', args=[1]))` |\n"
        "| `CELERY_X` | `GONE_SETTING`, `EAGER`, `job_done` |\n\n"
        '```python\nEVENTMQ = {"NOPE": 1, "QUEUES": {"a": 1}}\n'
        "from django_eventmq import job, nothing\n```\n"
        "`emq_jobmanager --queues a --no-such` `emq_nothing` `job.delay_later()` "
        "`handle.wait()` `current_job().retries` `cancel(msgid)` from `django_eventmq.gone`\n"
    )
    assert keywords("a=(1, 2), b=f(c=3), d") == ["a", "b"]
    assert wrong_job_keywords(page) == ["retries"]
    assert named_settings(page) - KNOWN_KEYS == {"GONE_SETTING", "NOPE"}
    assert wrong_commands(page) == ["emq_jobmanager --no-such", "emq_nothing: no such command"]
    assert wrong_attributes(page) == ["Job.delay_later", "current_job().retries"]
    assert wrong_signals(page) == ["job_done"]
    try:
        wrong_imports(page)
    except ModuleNotFoundError as exc:
        assert "django_eventmq.gone" in str(exc)
    else:
        raise AssertionError("a module that does not exist must fail the check")
    assert wrong_imports(page.split("`cancel(msgid)`")[0]) == ["django_eventmq.nothing"]
