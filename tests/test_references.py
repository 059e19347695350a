"""Names in prose stay true: cross-references resolve, no line says "core" for the
old package, and tests import modules under their own names.

- Every ``:mod:``, ``:class:``, ``:func:``, ``:exc:``, ``:meth:``, ``:attr:`` and
  ``:data:`` reference in a docstring or comment of ``django_eventmq/`` and in
  ``docs/*.md`` names something that exists. Read from the source (no imports,
  so Spark and Django modules count too), the way Sphinx looks them up: a
  leading ``.`` or ``..`` is relative to the module's package (``.pool`` in
  ``jobmanager/manager.py`` is ``jobmanager.pool``); a name is looked up in the
  module (its definitions and imports), then as the end of any name in the
  package (``.Book`` matches ``router.book.Book``); ``:mod:`` must name a module.
- "core", the package the runtime packages were split out of, is gone from
  prose and comments: ``django.core``, "2-core", "a core of its own", "the
  scheduler core" are other senses and stay.
- A test never imports a module under an alias that is another module's name
  (``from django_eventmq.jobmanager import worker_process as worker``,
  ``connection as client``): a reader would look for the wrong file.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from tests.support import ROOT

PACKAGE = ROOT / "django_eventmq"
DOCS = ROOT / "docs"
TESTS = ROOT / "tests"

_ROLE = re.compile(r":(mod|class|func|exc|meth|attr|data|obj):`([^`]+)`")
#: "core" as the old package's name. Not: quoted (a mention), part of an
#: identifier or a path (``django.core``, ``test_core.py``), a CPU ("2-core",
#: "a core", "no core", "cores"), a part's core ("the scheduler core").
_CORE = re.compile(
    r"""(?<![-.\w"'])(?<!\ba )(?<!\bno )(?<!er )\bcore\b(?![\w-]|\.\w)""", re.IGNORECASE
)

#: Module names the package used to have (``git log --diff-filter=R``): a test
#: must not call a module by one (the current names are checked anyway).
OLD_NAMES = {
    *("admin_dashboard", "admin_results", "admin_schedules", "client_exit", "core"),
    *("core_hooks", "dispatch", "integration", "journal_check", "journal_commit"),
    *("journal_finished", "journal_parcels", "journal_salvage", "journal_schedules"),
    *("journal_schema", "pipeline", "pubsub_cli", "queues", "results_models"),
    *("router_admin", "router_backend", "router_cli", "router_frontend", "router_holds"),
    *("router_io", "routerlink", "schedule_api", "scheduler_cli", "scheduling_models"),
    "worker",
}


@dataclass
class Module:
    name: str  # dotted
    is_package: bool
    #: Names the module defines at its top level (functions, classes, assignments).
    defs: set[str] = field(default_factory=set)
    #: Each class's members: methods, class attributes, ``self.x`` set in a method.
    members: dict[str, set[str]] = field(default_factory=dict)
    #: Each class's bases, as written (``Base``, ``module.Base``).
    bases: dict[str, list[str]] = field(default_factory=dict)
    #: ``name: dotted target`` of the module's imports (re-exports included).
    imports: dict[str, str] = field(default_factory=dict)


def _dotted(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def _absolute(module: Module, level: int, target: str | None) -> str:
    """The absolute name of ``from {'.' * level}{target}`` in ``module``."""
    if not level:
        return target or ""
    base = module.name.split(".")
    if not module.is_package:
        base.pop()
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


def _targets(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    return []


def _class_members(node: ast.ClassDef) -> set[str]:
    members = {name for stmt in node.body for name in _targets(stmt)}
    for sub in ast.walk(node):
        target = sub.target if isinstance(sub, ast.AnnAssign | ast.AugAssign) else None
        targets = sub.targets if isinstance(sub, ast.Assign) else [target] if target else []
        for t in targets:
            is_attribute = isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
            if is_attribute and t.value.id in ("self", "cls"):
                members.add(t.attr)
    return members


def _read(path: Path) -> Module:
    name, is_package = _dotted(path)
    module = Module(name, is_package)
    tree = ast.parse(path.read_text(), str(path))
    # Top level, and inside ``if``/``try`` (TYPE_CHECKING imports, fallbacks).
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If | ast.Try):
            stack.extend([*node.body, *node.orelse, *getattr(node, "finalbody", [])])
            for handler in getattr(node, "handlers", []):
                stack.extend(handler.body)
        module.defs.update(_targets(node))
        if isinstance(node, ast.ClassDef):
            module.members[node.name] = _class_members(node)
            module.bases[node.name] = [ast.unparse(base) for base in node.bases]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    module.imports[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    module.imports[top] = top
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, node.level, node.module)
            for alias in node.names:
                module.imports[alias.asname or alias.name] = f"{source}.{alias.name}"
    return module


@cache
def package() -> dict[str, Module]:
    modules = [_read(path) for path in sorted(PACKAGE.rglob("*.py"))]
    return {module.name: module for module in modules}


@cache
def definitions() -> frozenset[str]:
    """The full name of everything the package defines: modules, their top-level
    names and their classes' members (where each is defined, not re-exported)."""
    names = set(package())
    for module in package().values():
        names.update(f"{module.name}.{name}" for name in module.defs)
        for cls in module.members:
            names.update(f"{module.name}.{cls}.{m}" for m in members_of(module.name, cls))
    return frozenset(names)


@cache
def members_of(module_name: str, cls: str) -> frozenset[str]:
    """The members of class ``cls`` of ``module_name``, inherited ones included."""
    module = package()[module_name]
    members = set(module.members.get(cls, ()))
    for base in module.bases.get(cls, []):
        first, _, tail = base.partition(".")
        if first in module.defs:
            full = f"{module.name}.{base}"
        elif first in module.imports:
            full = f"{module.imports[first]}.{tail}" if tail else module.imports[first]
        else:
            continue
        home, _, name = full.rpartition(".")
        while home in package() and name not in package()[home].members:
            target = package()[home].imports.get(name)  # a re-export: follow it
            if target is None:
                break
            home, _, name = target.rpartition(".")
        if (
            home in package()
            and name in package()[home].members
            and (home, name)
            != (
                module_name,
                cls,
            )
        ):
            members |= members_of(home, name)
    return frozenset(members)


def _external(target: str) -> bool:
    """``target`` is an importable module or an attribute path of one (stdlib, Django)."""
    parts = target.split(".")
    if parts[0] == "django_eventmq":
        return False  # read from the source, never imported here
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except Exception:  # not a module, or one that needs setup (Django's apps)
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def exists(dotted: str, depth: int = 0) -> bool:
    """Whether the absolute name ``dotted`` exists, following imports (re-exports)."""
    if dotted in definitions():
        return True
    modules = package()
    head, rest = dotted, ""
    while head and head not in modules:
        head, _, last = head.rpartition(".")
        rest = f"{last}.{rest}" if rest else last
    if not head:
        return _external(dotted)
    first, _, tail = rest.partition(".")
    target = modules[head].imports.get(first)
    if target is None or depth > 10:
        return False
    return exists(f"{target}.{tail}" if tail else target, depth + 1)


def _ends(name: str) -> bool:
    """``name`` is the end of a definition's full name (Sphinx's search for ``.name``)."""
    return any(full.endswith(f".{name}") for full in definitions())


def resolves(role: str, target: str, where: Module | None) -> bool:
    """Whether ``target`` of ``:role:`` in ``where`` (None for a docs page) exists.

    ``:mod:`` must name a module. A relative name (``.pool``) is its package's module,
    or else the end of a definition; a bare name is the module's own (or its class
    members'), or else the end of a definition; an absolute one exists."""
    target = target.lstrip("~").removesuffix("()")
    bare = target.lstrip(".")
    relative = bare != target
    if role == "mod":
        modules = package()
        if (
            where is not None
            and relative
            and _absolute(where, len(target) - len(bare), bare) in modules
        ):
            return True
        return any(m == bare or m.endswith(f".{bare}") for m in modules) or (
            not relative and _external(target)
        )
    if where is not None:
        if relative and exists(_absolute(where, len(target) - len(bare), bare)):
            return True
        if not relative:
            first, _, tail = bare.partition(".")
            if (first in where.defs or first in where.imports) and exists(f"{where.name}.{bare}"):
                return True
            if not tail and any(first in members_of(where.name, c) for c in where.members):
                return True
    if not relative and (hasattr(builtins, bare) or exists(bare)):
        return True
    return _ends(bare)


def _references(text: str) -> Iterator[tuple[int, str, str]]:
    for lineno, line in enumerate(text.splitlines(), 1):
        for match in _ROLE.finditer(line):
            yield lineno, match.group(1), match.group(2)


def _prose_files() -> Iterator[tuple[Path, Module | None]]:
    modules = package()
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, modules[_dotted(path)[0]]
    for path in sorted(DOCS.glob("*.md")):
        yield path, None


def test_references_resolve() -> None:
    broken = [
        f"{path.relative_to(ROOT)}:{lineno}: :{role}:`{target}`"
        for path, module in _prose_files()
        for lineno, role, target in _references(path.read_text())
        if not resolves(role, target, module)
    ]
    assert not broken, "references to nothing:\n" + "\n".join(broken)


def _code_free(path: Path) -> Iterator[tuple[int, str]]:
    """The lines of ``path`` with code identifiers taken out (prose and comments stay)."""
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        yield lineno, re.sub(r"\b(?:django|prometheus_client)\.core\b", "", line)


def test_no_line_says_core_for_the_old_package() -> None:
    files = [*PACKAGE.rglob("*.py"), *DOCS.glob("*.md"), *TESTS.rglob("*.py"), ROOT / "README.md"]
    said = [
        f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}"
        for path in sorted(files)
        if path != Path(__file__)  # this file says what it looks for
        for lineno, line in _code_free(path)
        if _CORE.search(line)
    ]
    assert not said, "'core' was a package; name the runtime packages instead:\n" + "\n".join(said)


def _module_names() -> dict[str, set[str]]:
    """Each last name of a module or package in django_eventmq: the dotted names it has."""
    names: dict[str, set[str]] = {}
    for dotted in package():
        names.setdefault(dotted.rsplit(".", 1)[-1], set()).add(dotted)
    return names


def misleading_aliases(path: Path) -> Iterator[tuple[int, str, str]]:
    """``(line, module, alias)`` of each package module ``path`` imports under a name
    that is another module's (or a former module's) name."""
    names, modules = _module_names(), package()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith(
            "django_eventmq"
        ):
            continue
        for alias in node.names:
            full = f"{node.module}.{alias.name}"
            if full not in modules or not alias.asname or alias.asname == alias.name:
                continue
            if alias.asname == "_".join(full.split(".")[-2:]):
                continue  # ``dashboard as admin_dashboard``: its package and its name
            if alias.asname in OLD_NAMES or names.get(alias.asname, set()) - {full}:
                yield node.lineno, full, alias.asname


def test_tests_import_modules_under_their_own_names() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{lineno}: {module} as {alias}"
        for path in sorted(TESTS.rglob("*.py"))
        for lineno, module, alias in misleading_aliases(path)
    ]
    assert not found, "import these under their own names:\n" + "\n".join(found)


def test_the_checks_catch_what_they_are_for() -> None:
    """The three checks fail on the mistakes they are for (and pass real names)."""
    manager = package()["django_eventmq.jobmanager.manager"]
    assert resolves("mod", ".pool", manager)
    assert resolves("mod", "..protocol.bundle", manager)
    assert not resolves("mod", ".worker", manager)
    assert not resolves("class", ".worker.Worker", manager)
    assert resolves("class", "JobManager", manager)
    assert resolves("class", "asyncio.CancelledError", None)
    assert not resolves("func", "no_such_function_anywhere", manager)
    assert _CORE.search("Hooks the Django layer installs into core.")
    assert _CORE.search("# Core code asks runtime.config")
    others = (
        "a 2-core machine",
        "a core of its own",
        "django.core",
        "the scheduler core",
        '"core"',
    )
    for other in others:
        assert not _CORE.search(other), other


def test_an_alias_naming_another_module_is_found(tmp_path: Path) -> None:
    test = tmp_path / "test_x.py"
    test.write_text(
        "from django_eventmq.jobmanager import worker_process as worker\n"
        "from django_eventmq.client import connection as client\n"
        "from django_eventmq.admin import dashboard as admin_dashboard\n"
        "from django_eventmq.cli import options as cli_options\n"
        "from django_eventmq.protocol import constants as C\n"
    )
    assert [alias for _line, _module, alias in misleading_aliases(test)] == ["worker", "client"]
