"""benchmarks/soak.py: a short soak on real processes, and what it counts as loud."""

from __future__ import annotations

import re
from types import SimpleNamespace

from benchmarks import soak


def test_a_short_soak_processes_every_job_and_reports_memory(capsys):
    assert soak.main(["--seconds", "2", "--rate", "200", "--every", "1"]) == 0
    out = capsys.readouterr().out
    found = re.search(r"processed ([\d,]+) of ([\d,]+); peak RSS router ([\d.]+) MiB", out)
    assert found is not None, out
    assert found.group(1) == found.group(2)
    assert int(found.group(1).replace(",", "")) >= 300
    assert float(found.group(3)) > 0
    assert "0 warning/error line(s)" in out


def test_loud_lines_are_warnings_and_errors_of_either_process():
    def proc(text: str) -> SimpleNamespace:
        return SimpleNamespace(output=lambda: text)

    stack = SimpleNamespace(
        router=proc("x INFO router ready\ny WARNING journal slow\n"),
        jobmanager=proc("z ERROR worker died\nw DEBUG fine\n"),
    )
    assert soak.loud_lines(stack) == [  # type: ignore[arg-type]
        "router: y WARNING journal slow",
        "jobmanager: z ERROR worker died",
    ]


def test_bad_arguments_are_refused(capsys):
    try:
        soak.main(["--seconds", "0"])
    except SystemExit as exc:
        assert exc.code == 2
    else:
        raise AssertionError("--seconds 0 was accepted")
    assert "must be positive" in capsys.readouterr().err
