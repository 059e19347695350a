"""The ``process`` marker: tests that start processes, found when collected and checked when run.

``pytest -m "not process" tests/router`` runs a folder's unit tests in seconds;
the tests that start routers, job managers (whose workers are processes) or
commands are the slow ones, and ``make test`` runs them all.

A test is marked when its code, its fixtures' code, its parameters, or the
test helpers (``tests.*``, ``benchmarks.*``) they call reach something that starts a
process: ``subprocess``, ``os.fork``, ``multiprocessing``, or one of
:data:`STARTERS` (package classes whose objects start processes). A test that
starts a process the collection did not see fails with a message naming the
fix (:data:`MARKED` or ``@pytest.mark.process``), so ``-m "not process"`` stays
free of them.

Registered by ``tests/conftest.py`` (``pytest_plugins``).
"""

from __future__ import annotations

import contextlib
import dis
import inspect
import multiprocessing.process
import os
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest

#: Package objects whose use starts processes (the job manager's workers).
STARTERS = frozenset(
    {
        "django_eventmq.jobmanager.manager.JobManager",
        "django_eventmq.jobmanager.pool.Pool",
        "django_eventmq.__main__.run_jobmanager",
    }
)

#: Test files (or node ids) that start processes in ways the collection cannot see,
#: e.g. through a package function that runs a whole command in-process.
MARKED: frozenset[str] = frozenset()

#: ``module: attributes`` that start a process when called.
_SPAWNING_ATTRS = {
    "subprocess": {"Popen", "run", "call", "check_call", "check_output", "getoutput"},
    "os": {"fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "popen"},
    "multiprocessing": {"Process", "Pool", "get_context"},
    "asyncio": {"create_subprocess_exec", "create_subprocess_shell"},
    "pty": {"fork", "spawn"},
}
_HELPER_PREFIXES = ("tests.", "benchmarks.")

_seen: dict[int, bool] = {}


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """``code`` and the code of the functions, lambdas and classes defined in it."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _starts_process(obj: Any) -> bool:
    """Whether calling or using ``obj`` may start a process (memoised, cycle-safe)."""
    if callable(obj):
        with contextlib.suppress(ValueError):  # a wrapper loop (a mock): as it is
            obj = inspect.unwrap(obj)
    key = id(obj)
    if key in _seen:
        return _seen[key]
    _seen[key] = False  # a cycle (recursion) adds nothing
    found = _check(obj)
    _seen[key] = found
    return found


def _check(obj: Any) -> bool:
    if _qualname(obj) in STARTERS:
        return True
    module = getattr(obj, "__module__", None) or ""
    if not module.startswith(_HELPER_PREFIXES):
        return False
    if isinstance(obj, type):
        members = [
            m.fget if isinstance(m, property) else getattr(m, "__func__", m)
            for klass in obj.__mro__
            if klass.__module__.startswith(_HELPER_PREFIXES)
            for m in vars(klass).values()
        ]
        return any(_starts_process(m) for m in members if isinstance(m, types.FunctionType))
    if isinstance(obj, types.FunctionType):
        return _function_starts(obj)
    return False


def _local_imports(code: types.CodeType) -> dict[str, Any]:
    """What ``import``/``from ... import`` statements inside ``code`` bind, by the
    local name (modules already loaded only: collecting imports nothing new)."""
    bound: dict[str, Any] = {}
    module: Any = None
    value: Any = None
    for ins in dis.get_instructions(code):
        if ins.opname == "IMPORT_NAME":
            module = value = sys.modules.get(ins.argval)
            if ins.argval and "." in ins.argval:  # ``import a.b`` binds ``a``
                value = sys.modules.get(ins.argval.split(".")[0])
        elif ins.opname == "IMPORT_FROM" and module is not None:
            value = getattr(module, ins.argval, None)
            if value is None:
                value = sys.modules.get(f"{module.__name__}.{ins.argval}")
        elif ins.opname.startswith("STORE_") and value is not None:
            bound[ins.argval] = value
            value = None
    return bound


def _function_starts(func: types.FunctionType) -> bool:
    names = {name for code in _codes(func.__code__) for name in code.co_names}
    scope = dict(func.__globals__)
    for code in _codes(func.__code__):
        imported = _local_imports(code)
        scope.update(imported)
        names |= imported.keys()
    for cell_name, cell in zip(func.__code__.co_freevars, func.__closure__ or (), strict=False):
        try:
            scope[cell_name] = cell.cell_contents
        except ValueError:  # an empty cell
            continue
    names |= set(func.__code__.co_freevars)
    for name in names & scope.keys():
        value = scope[name]
        if isinstance(value, types.ModuleType):
            spawning = _SPAWNING_ATTRS.get(value.__name__, set())
            if names & spawning:
                return True
            attrs = [getattr(value, n) for n in names if hasattr(value, n)]
            if any(_starts_process(a) for a in attrs):
                return True
        elif _spawner(value) or _starts_process(value):
            return True
    return False


def _spawner(value: Any) -> bool:
    """One of the standard library's ways to start a process, imported by name."""
    return any(
        getattr(value, "__module__", None) == module and getattr(value, "__name__", "") in attrs
        for module, attrs in _SPAWNING_ATTRS.items()
    ) or any(value is known for known in (subprocess.Popen, multiprocessing.Process, os.fork))


def _fixture_funcs(item: pytest.Item) -> Iterator[Callable[..., Any]]:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return
    for name in info.names_closure:
        for fixturedef in info.name2fixturedefs.get(name, ()):
            yield fixturedef.func


def starts_process(item: pytest.Item) -> bool:
    """Whether the collection can see that ``item`` starts a process."""
    path = item.nodeid.split("::", 1)[0]
    if path in MARKED or item.nodeid in MARKED:
        return True
    function = getattr(item, "function", None)
    if function is not None and _starts_process(function):
        return True
    cls = getattr(item, "cls", None)
    if cls is not None and _starts_process(cls):
        return True
    callspec = getattr(item, "callspec", None)  # parametrize values: helpers, classes
    if callspec is not None and any(_starts_process(v) for v in callspec.params.values()):
        return True
    return any(_starts_process(func) for func in _fixture_funcs(item))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "process: starts processes (routers, job managers, commands); "
        'added by tests/process_marks.py. Skip with -m "not process"',
    )
    _watch_spawns()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("process") is None and starts_process(item):
            item.add_marker(pytest.mark.process)


# --- Seen when run: a test that starts a process unmarked fails. -------------------

_spawns: list[str] = []


def _watch_spawns() -> None:
    """Count the processes this process starts (every way ends in one of these)."""
    if getattr(subprocess.Popen, "_emq_watched", False):
        return

    def watch(owner: Any, name: str) -> None:
        original = getattr(owner, name)

        def watched(*args: Any, **kwargs: Any) -> Any:
            _spawns.append(f"{owner.__name__}.{name}")
            return original(*args, **kwargs)

        setattr(owner, name, watched)

    watch(subprocess.Popen, "_execute_child")
    watch(multiprocessing.process.BaseProcess, "start")
    watch(os, "fork")
    watch(os, "posix_spawn")
    subprocess.Popen._emq_watched = True  # type: ignore[attr-defined]


_KEY = pytest.StashKey[int]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_KEY] = len(_spawns)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    result = yield
    started = _spawns[item.stash.get(_KEY, len(_spawns)) :]
    if started and item.get_closest_marker("process") is None:
        pytest.fail(
            f"{item.nodeid} started a process ({started[0]}) but is not marked 'process': "
            "add its file to MARKED in tests/process_marks.py (or the package class "
            "that starts it to STARTERS), or mark it @pytest.mark.process",
            pytrace=False,
        )
    return result
