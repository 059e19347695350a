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
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadGroupScheduling

#: Test paths (from the root) whose tests run in one worker, by group name.
GROUPS = {
    "tests/contrib/spark/": "spark",
    # Each checks that the worktrees it makes are gone: one at a time.
    "tests/benchmarks/test_versus.py": "versus",
}

_MODULE_FIXTURE = re.compile(r"""scope\s*=\s*["']module["']""")


class SuiteScheduling(LoadGroupScheduling):
    """xdist's loadgroup with the groups above decided from each test's file."""

    def __init__(self, config: pytest.Config, log: Producer | None = None) -> None:
        super().__init__(config, log)
        self._root = Path(config.rootpath)
        self._file_groups: dict[str, str] = {}

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
