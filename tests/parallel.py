"""How ``pytest -n N --dist loadgroup`` (scripts/test.sh) shares the suite out.

Each test is a unit of work of its own (xdist's ``load``), except:

- every test under ``tests/contrib/spark/`` goes to one worker, so one JVM (the
  session's Spark fixtures) serves them all;
- the tests of a file that has a module-scoped fixture (in the file or in a
  ``conftest.py`` of its directories) go to one worker, so each such router or
  site is started once, not once per worker;
- xdist's own ``@pytest.mark.xdist_group`` still works where xdist can put the
  group in the test's id.

The choice is made here on the controller, from the test ids and the files:
with pytest 9.2 the xdist 3.8 worker can no longer add the group to the id.

The longest work goes out first: each run records how long each test took
(:func:`record`, in pytest's cache, ``.pytest_cache``) and the next run hands
out its groups and tests longest first, so no worker picks up a minute-long
test while the others run out of work (the tests of ``tests/system/`` come last
in collection order). Without a record (a first run, ``-p no:cacheprovider``)
xdist's own order stays: the biggest groups first.
"""

from __future__ import annotations

import re
import statistics
from collections import OrderedDict
from pathlib import Path

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadGroupScheduling
from xdist.workermanage import WorkerController

#: Test paths (from the root) whose tests run in one worker, by group name.
GROUPS = {
    "tests/contrib/spark/": "spark",
    # Each checks that the worktrees it makes are gone: one at a time.
    "tests/benchmarks/test_versus.py": "versus",
}

_MODULE_FIXTURE = re.compile(r"""scope\s*=\s*["']module["']""")

#: Where :func:`record` keeps the seconds each test took (setup, call, teardown).
DURATIONS = "emq/durations"


class SuiteScheduling(LoadGroupScheduling):
    """xdist's loadgroup with the groups above decided from each test's file."""

    def __init__(self, config: pytest.Config, log: Producer | None = None) -> None:
        super().__init__(config, log)
        self._root = Path(config.rootpath)
        self._file_groups: dict[str, str] = {}
        cache = getattr(config, "cache", None)
        self._durations: dict[str, float] = cache.get(DURATIONS, {}) if cache else {}
        self._ordered = False

    def _assign_work_unit(self, node: WorkerController) -> None:
        # The first call comes once xdist made its work units (scopes), before it
        # hands any out: order them by their recorded seconds, longest first (a
        # test never recorded counts as the median one).
        if not self._ordered and self._durations:
            self._ordered = True
            default = statistics.median(self._durations.values())
            cost = {
                scope: sum(self._durations.get(nodeid, default) for nodeid in unit)
                for scope, unit in self.workqueue.items()
            }
            self.workqueue = OrderedDict(sorted(self.workqueue.items(), key=lambda u: -cost[u[0]]))
        super()._assign_work_unit(node)

    def _split_scope(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        if path not in self._file_groups:
            self._file_groups[path] = self._group_of(path)
        return self._file_groups[path] or super()._split_scope(nodeid)

    def _group_of(self, path: str) -> str:
        """The group every test of ``path`` joins, or "" for none."""
        for prefix, group in GROUPS.items():
            if path.startswith(prefix):
                return group
        file = self._root / path
        sources = [file, *(d / "conftest.py" for d in file.parents if self._root in d.parents)]
        for source in sources:
            try:
                if _MODULE_FIXTURE.search(source.read_text(errors="replace")):
                    return path
            except OSError:  # no conftest.py there
                continue
        return ""


class DurationRecorder:
    """Adds up the seconds of each test's setup, call and teardown in this run and
    keeps them in pytest's cache at the end, over the last run's (the controller's
    record with xdist: workers record nothing)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        cache = getattr(session.config, "cache", None)
        if cache is None or not self.seconds:
            return
        recorded: dict[str, float] = cache.get(DURATIONS, {})
        recorded.update({nodeid: round(secs, 3) for nodeid, secs in self.seconds.items()})
        cache.set(DURATIONS, recorded)


def record(config: pytest.Config) -> None:
    """Record test durations for :class:`SuiteScheduling` (not in xdist workers)."""
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(DurationRecorder(), "emq-durations")
