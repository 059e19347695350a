"""Every module's tests have a home a newcomer can find.

A module ``django_eventmq/<package>/<name>.py`` is at home when its package's
test folder (``tests/<package>/``; ``tests/django/`` for the Django glue at the
top level, ``admin/``, ``models/`` and ``management/``) holds a
``test_<name>.py`` or ``test_<name>_*.py``. Any other module has a row in
``tests/HOMES.md`` naming the test files (or folders) that test it. A package
``__init__.py`` that only re-exports needs neither.

When you rename or add a module, the failure names the row to add or fix.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support import ROOT

PACKAGE = ROOT / "django_eventmq"
TESTS = ROOT / "tests"
HOMES = TESTS / "HOMES.md"

#: Packages of the Django glue: their tests live in tests/django/.
_DJANGO_GLUE = {"admin", "models", "management", "migrations", "templatetags"}


def modules() -> list[Path]:
    """The package's modules that need tests (migrations are Django's)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "migrations":
            continue
        if path.name == "__init__.py" and not _defines_something(path):
            continue
        found.append(path)
    return found


def _defines_something(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        for node in tree.body
    )


def folder_of(module: Path) -> Path:
    """Where the tests of ``module`` live by default."""
    rel = module.relative_to(PACKAGE)
    if len(rel.parts) == 1 or rel.parts[0] in _DJANGO_GLUE:
        return TESTS / "django"
    if rel.parts[0] == "contrib":
        return TESTS.joinpath(*rel.parts[:2])
    return TESTS / rel.parts[0]


def module_name(module: Path) -> str:
    """``router/book.py`` -> ``book``; a package's ``__init__.py`` -> the package."""
    return module.parent.name if module.name == "__init__.py" else module.stem


def has_test_file(module: Path) -> bool:
    name = module_name(module)
    folder = folder_of(module)
    return any(folder.rglob(f"test_{name}.py")) or any(folder.rglob(f"test_{name}_*.py"))


def homes() -> dict[str, list[str]]:
    """The rows of tests/HOMES.md: ``module path: [test paths]``."""
    rows: dict[str, list[str]] = {}
    for line in HOMES.read_text().splitlines():
        match = re.match(r"\|\s*`([^`]+\.py)`\s*\|(.*)\|\s*$", line)
        if match:
            rows[match.group(1)] = re.findall(r"`([^`]+)`", match.group(2))
    return rows


def test_every_module_has_a_home_for_its_tests() -> None:
    rows = homes()
    homeless = [
        str(module.relative_to(ROOT))
        for module in modules()
        if not has_test_file(module) and str(module.relative_to(ROOT)) not in rows
    ]
    assert not homeless, (
        "no test_<module>.py in its tests folder and no row in tests/HOMES.md: "
        + ", ".join(homeless)
    )


def test_homes_name_modules_and_tests_that_exist() -> None:
    problems = []
    for module, tests in homes().items():
        if not (ROOT / module).is_file():
            problems.append(f"{module}: no such module (renamed? fix the row)")
        if not tests:
            problems.append(f"{module}: names no test file")
        problems.extend(f"{module}: no {test}" for test in tests if not (ROOT / test).exists())
    assert not problems, "tests/HOMES.md:\n" + "\n".join(problems)


def test_no_row_for_a_module_that_has_its_test_file() -> None:
    """A row is only for modules without a test_<module>.py (else it goes stale)."""
    extra = [m for m in homes() if (ROOT / m).is_file() and has_test_file(ROOT / m)]
    assert not extra, "these have their test_<module>.py; remove their rows: " + ", ".join(extra)
