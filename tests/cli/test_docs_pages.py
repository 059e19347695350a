"""The commands page names every command and each of its options; the operations page names
every metric the endpoints export. Checked against the parsers and collectors themselves."""

from __future__ import annotations

import argparse
import logging
import logging.config
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.core.management import load_command_class
from prometheus_client import CollectorRegistry

from django_eventmq.__main__ import build_parser
from django_eventmq.cli import metrics, status
from django_eventmq.runtime import stats
from django_eventmq.runtime.logs import job_debug
from tests.cli.test_status_render import SCHEDULERS, STATUS, WORKERS
from tests.support import ROOT

DOCS = ROOT / "docs"
COMMANDS_DIR = ROOT / "django_eventmq" / "management" / "commands"
#: Options every Django command has: documented by Django.
DJANGO_OPTIONS = {
    "-h", "--help", "--version", "-v", "--verbosity", "--settings", "--pythonpath",
    "--traceback", "--no-color", "--force-color", "--skip-checks",
}  # fmt: skip


def management_commands() -> list[str]:
    return sorted(p.stem for p in COMMANDS_DIR.glob("emq_*.py"))


def section(page: str, heading: str) -> str:
    """The text of ``## heading`` in ``page``, up to the next ``## ``."""
    text = (DOCS / page).read_text()
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"no section {heading!r} in docs/{page}"
    return match.group(1)


def own_options(parser: argparse.ArgumentParser) -> set[str]:
    names = {s for action in parser._actions for s in action.option_strings}
    names |= {a.metavar for a in parser._actions if not a.option_strings and a.metavar}  # type: ignore[misc]
    return names - DJANGO_OPTIONS


def test_the_command_directory_is_what_the_page_lists():
    assert len(management_commands()) >= 8
    overview = section("commands.md", "At a glance")
    for name in management_commands():
        assert f"| `{name}` |" in overview, name


@pytest.mark.parametrize("name", management_commands())
def test_every_management_command_has_a_section_naming_each_option(name):
    parser = load_command_class("django_eventmq", name).create_parser("manage.py", name)
    text = section("commands.md", f"`{name}`")
    missing = sorted(opt for opt in own_options(parser) if f"`{opt}" not in text)
    assert not missing, f"docs/commands.md, {name}: options not described: {missing}"


def test_every_python_m_subcommand_is_listed_with_its_options():
    subparsers = next(
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    )
    overview = section("commands.md", "At a glance")
    page = (DOCS / "commands.md").read_text()
    for name, parser in subparsers.choices.items():
        assert f"| `{name}` |" in overview, name
        missing = sorted(opt for opt in own_options(parser) if f"`{opt}" not in page)
        assert not missing, f"python -m django_eventmq {name}: {missing}"


def _family_names(collector: object) -> set[str]:
    registry = CollectorRegistry()
    registry.register(collector)  # type: ignore[arg-type]
    return {
        sample.name.removesuffix("_total")
        for family in registry.collect()
        for sample in family.samples
        if not sample.name.endswith(("_bucket", "_count", "_sum"))
    } | {family.name for family in registry.collect() if family.type == "histogram"}


def test_the_operations_page_names_every_metric():
    snapshot = status.Snapshot(
        admin_addr="a",
        taken_at=1.0,
        status=STATUS,
        workers=WORKERS,
        schedulers=SCHEDULERS,
        monitor={"store_bytes": 1, "syncs": 1, "expired": 0, "rejected": 0, "duplicates": 0},
    )

    class Fixed(metrics.RouterAdminCollector):
        def collect(self):  # type: ignore[no-untyped-def]
            yield from metrics.router_families(snapshot)

    lifecycle = SimpleNamespace(stats=stats.Stats())
    manager = SimpleNamespace(
        jobs={},
        settings=SimpleNamespace(queues=((10, "default"),)),
        slots=4,
        pool=SimpleNamespace(children={}),
        link=SimpleNamespace(connected=True, heartbeats_missed=0),
        lifecycle=lifecycle,
    )
    names = _family_names(Fixed("unused")) | _family_names(metrics.JobManagerCollector(manager))
    page = (DOCS / "operations.md").read_text()
    assert len(names) > 20
    missing = sorted(n for n in names if f"`{n}`" not in page and f"`{n}_total`" not in page)
    assert not missing, f"docs/operations.md does not name: {missing}"


def test_the_logging_example_of_the_operations_page_works(capsys):
    """The LOGGING dict shown in docs/operations.md, applied with dictConfig."""
    text = (DOCS / "operations.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "LOGGING" in b]
    scope: dict[str, object] = {}
    exec(block, scope)
    names = [name for name in scope["LOGGING"]["loggers"]]  # type: ignore[index]
    saved = {
        name: (lg.level, list(lg.handlers), list(lg.filters), lg.propagate)
        for name in names
        if (lg := logging.getLogger(name))
    }
    try:
        logging.config.dictConfig(scope["LOGGING"])  # type: ignore[arg-type]
        job_debug(logging.getLogger("django_eventmq.client"), "sent", "m-1", "email", job="a.b")
        logging.getLogger("django_eventmq.jobmanager").info("jobmanager ready")
        logging.getLogger("django_eventmq.router").info("not shown: WARNING and up only")
    finally:
        for name, (level, handlers, filters, propagate) in saved.items():
            lg = logging.getLogger(name)
            lg.setLevel(level)
            lg.handlers[:] = handlers
            lg.filters[:] = filters
            lg.propagate = propagate
    lines = [line.split(" ", 2)[2] for line in capsys.readouterr().err.splitlines()]
    assert lines == [
        "DEBUG django_eventmq.client msgid=m-1 queue=email job=a.b | "
        "job sent msgid=m-1 queue=email job=a.b",
        "INFO django_eventmq.jobmanager msgid= queue= job= | jobmanager ready",
    ]


def test_pages_are_in_the_toctree():
    index = (DOCS / "index.md").read_text()
    for page in ("operations", "commands"):
        assert re.search(rf"^{page}$", index, re.M), page
        assert Path(DOCS / f"{page}.md").exists()
