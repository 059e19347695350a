"""What README.md and the docs' first pages tell a newcomer, checked against the code: the
settings table (every setting, its default), the system check ids, the install commands
and why a quickstart job is not under Job results."""

from __future__ import annotations

import dataclasses
import re
from fnmatch import fnmatchcase
from typing import Any

import pytest

from django_eventmq.runtime.settings import KNOWN_KEYS, Settings, parse_queues
from tests.support import ROOT

PACKAGE = ROOT / "django_eventmq"
README = ROOT / "README.md"
QUICKSTART = ROOT / "docs" / "quickstart.md"
PUBSUB = ROOT / "docs" / "pubsub.md"
DEFAULTS = {f.name.upper(): getattr(Settings(), f.name) for f in dataclasses.fields(Settings)}
#: How a table writes an empty default.
EMPTY = {"empty", '""', "()", "{}"}
UNITS = {"MiB": 1024 * 1024, "days": 86400}


def section(text: str, heading: str) -> str:
    """From ``heading`` (a whole line) to the next heading of its level or above."""
    level = heading.split(" ", 1)[0]
    start = text.index(f"\n{heading}\n")
    end = re.search(rf"^#{{1,{len(level)}}} ", text[start + len(heading) + 2 :], re.M)
    return text[start : start + len(heading) + 2 + end.start() if end else len(text)]


def settings_rows(text: str) -> list[tuple[list[str], list[str]]]:
    """``(keys, defaults)`` of each row of the settings tables in ``text``: a row's
    first cell names one key or several (in backticks), its second cell gives one
    default each (in backticks), or one for all (``empty``)."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        keys = re.findall(r"`([A-Z][A-Z0-9_*]*)`", cells[0])
        defaults = re.findall(r"`([^`]*)`", cells[1]) or [cells[1]]
        if len(defaults) == 1:
            defaults *= len(keys)
        assert len(defaults) == len(keys), f"one default per setting: {line}"
        rows.append((keys, defaults))
    return rows


def value(text: str, like: Any) -> Any:
    """The value a table's default ``text`` means, in the type of ``like``."""
    text = re.sub(r"\s+\(.*\)$", "", text)  # "0 (off)"
    if text in EMPTY:
        return type(like)()
    if isinstance(like, bool):
        return {"True": True, "False": False}[text]
    if isinstance(like, int | float):
        number, _, unit = text.partition(" ")
        return float(number) * UNITS.get(unit, 1)
    if isinstance(like, tuple) and like and isinstance(like[0], tuple):
        return parse_queues(text)
    return text


def wrong_defaults(rows: list[tuple[list[str], list[str]]]) -> list[str]:
    wrong = []
    for keys, defaults in rows:
        for key, shown in zip(keys, defaults, strict=True):
            matched = [k for k in DEFAULTS if fnmatchcase(k, key)]
            if not matched:
                wrong.append(f"{key}: no such setting")
            wrong += [
                f"{k}: the table says {shown!r}, the default is {DEFAULTS[k]!r}"
                for k in matched
                if value(shown, DEFAULTS[k]) != DEFAULTS[k]
            ]
    return wrong


def test_the_readme_settings_table_lists_every_setting_with_its_default():
    rows = settings_rows(section(README.read_text(), "## Settings"))
    assert len(rows) > 30
    assert wrong_defaults(rows) == []
    named = [key for keys, _ in rows for key in keys]
    missing = sorted(k for k in KNOWN_KEYS if not any(fnmatchcase(k, n) for n in named))
    assert missing == [], f"add these settings to README.md's table: {missing}"


def test_the_pubsub_page_agrees_with_the_settings():
    rows = settings_rows(section(PUBSUB.read_text(), "## Settings"))
    assert {k for keys, _ in rows for k in keys} == {
        "PUBLISHER_INCOMING_ADDR",
        "PUBLISHER_OUTGOING_ADDR",
        "PUBLISH_ADDR",
        "SUBSCRIBE_ADDR",
    }
    assert wrong_defaults(rows) == []


def test_the_table_checks_can_fail():
    rows = settings_rows(
        "| `QUEUES` | `email:1` | x |\n| `ACK_TIMEOUT`, `ACK_RETRIES` | `2`, `4` | x |\n"
        "| `GONE` | empty | x |\n| `CURVE_*` | `k` | x |\n| `MAX_TIMEOUT` | `7 days` | x |"
    )
    wrong = wrong_defaults(rows)
    assert wrong[:3] == [
        "QUEUES: the table says 'email:1', the default is ((10, 'default'),)",
        "ACK_RETRIES: the table says '4', the default is 3",
        "GONE: no such setting",
    ]
    assert len(wrong) == 3 + sum(k.startswith("CURVE_") for k in DEFAULTS)
    assert value("64 MiB", 1) == 64 * 1024 * 1024 and value("0 (off)", 0) == 0
    assert value("empty", ()) == () and value('""', "x") == ""


def check_ids() -> set[str]:
    """Every system check id the package defines (``django_eventmq.E001``, ...)."""
    ids = set()
    for module in PACKAGE.rglob("*.py"):
        source = module.read_text()
        ids |= set(re.findall(r"django_eventmq\.([EW]\d{3})\b", source))
        ids |= set(
            re.findall(
                r"""\b(?:_error\(|code\s*=\s*|code,\s*hint\s*=\s*)["']([EW]\d{3})["']""", source
            )
        )
    return ids


def test_the_quickstart_names_every_check_id():
    ids = check_ids()
    assert {"E001", "E004", "E005", "E010", "W001", "W002"} <= ids
    text = QUICKSTART.read_text()
    unnamed = sorted(i for i in ids if f"`django_eventmq.{i}`" not in text)
    assert unnamed == [], f"docs/quickstart.md does not name the checks {unnamed}"


@pytest.mark.parametrize("page", [README, QUICKSTART], ids=["README", "quickstart"])
def test_the_install_commands_name_no_folder_of_the_readers(page):
    # "pip install ./django-eventmq" worked only in the folder above a clone of that name.
    commands = re.findall(r"^\$ (pip .*)$", page.read_text(), re.M)
    assert len(commands) >= 3, commands
    for command in commands:
        paths = [w for w in command.split("#")[0].split()[2:] if not w.startswith("-")]
        assert all(p.startswith(("/path/to/", "dist/", "dist")) for p in paths), command


@pytest.mark.parametrize("page", [README, QUICKSTART], ids=["README", "quickstart"])
def test_the_quickstart_says_why_its_job_is_not_under_job_results(page):
    text = " ".join(page.read_text().split())
    said = re.search(r"`send_welcome` runs but does not show under \*Job results\*.*?\.", text)
    assert said is not None
    for needed in ("reply_requested=True", "RECORD_ALL_RESULTS"):
        assert needed in text[said.start() : said.start() + 400], needed
