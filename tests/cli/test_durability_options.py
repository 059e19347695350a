"""The router's journal and back-pressure options reach the settings."""

from __future__ import annotations

import argparse

import pytest

from django_eventmq.cli import options
from django_eventmq.runtime.settings import Settings


def _parse(*argv: str) -> Settings:
    parser = argparse.ArgumentParser()
    options.add_router_arguments(parser)
    return options.settings_from_options(Settings(), parser.parse_args(list(argv)))


def test_journal_path_and_sync():
    s = _parse("--journal", "/tmp/j.sqlite3", "--journal-sync", "normal")
    assert (s.journal, s.journal_path, s.journal_sync) == (True, "/tmp/j.sqlite3", "normal")


def test_no_journal():
    assert _parse("--no-journal").journal is False


def test_high_water_mark_and_policy():
    s = _parse("--high-water-mark", "500", "--hwm-policy", "reject")
    assert (s.high_water_mark, s.hwm_policy) == (500, "reject")


def test_journal_and_no_journal_exclude_each_other(capsys):
    with pytest.raises(SystemExit):
        _parse("--journal", "/tmp/j", "--no-journal")
    assert "not allowed with" in capsys.readouterr().err


def test_defaults_leave_the_settings_alone():
    assert _parse() == Settings()
