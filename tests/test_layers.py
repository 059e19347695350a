"""The layer rule, checked on the code as it is.

- ``protocol/`` is sans-IO: it imports no zmq, no Django and no clock, and
  nothing of the package outside itself but the exception tree.
- No package outside the Django glue loads Django.
- A process's package never imports another process's package: the router
  loads no client, job-manager or scheduler-sending code.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "django_eventmq"

# Packages that must run without a Django project.
RUNTIME = ("protocol", "runtime", "router", "jobmanager", "client", "scheduling", "pubsub", "cli")

# What each package may import from django_eventmq (besides itself and errors).
ALLOWED = {
    "protocol": set(),
    "runtime": {"protocol"},
    "router": {"protocol", "runtime", "scheduling.identity", "scheduling.timing"},
    "jobmanager": {"protocol", "runtime"},
    "client": {"protocol", "runtime", "scheduling.timing"},
    "scheduling": {"protocol", "runtime", "client"},
    "pubsub": {"protocol", "runtime"},
    "cli": {"protocol", "runtime", "router", "jobmanager", "scheduling", "pubsub", "client"},
    "contrib": {"protocol", "runtime", "client", "cli"},
}
CLOCK = {"time", "datetime", "zmq", "django", "asyncio", "socket", "threading", "selectors"}


def _modules(package: str) -> list[Path]:
    return sorted((PACKAGE / package).rglob("*.py"))


def _dotted(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in the file, as absolute names."""
    me = _dotted(path).split(".")
    return _imports_in(path.read_text(), me if path.name == "__init__.py" else me[:-1])


def _imports_in(source: str, me: list[str]) -> set[str]:
    tree = ast.parse(source)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                prefix = me[: len(me) - (node.level - 1)]
                base = ".".join([*prefix, base] if base else prefix)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _ours(name: str) -> str | None:
    """``django_eventmq.router.book`` -> ``router.book``; None for other libraries."""
    if not name.startswith("django_eventmq."):
        return None
    return name.removeprefix("django_eventmq.")


def _allowed(package: str, target: str) -> bool:
    if target == "errors" or target.split(".")[0] == package:
        return True
    return any(target == ok or target.startswith(ok + ".") for ok in ALLOWED[package])


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_the_layers_below_it(package):
    offenders = []
    for path in _modules(package):
        for name in _imports(path):
            target = _ours(name)
            if target is None or not (PACKAGE / target.split(".")[0]).is_dir():
                continue  # a library, or a name imported from a package's __init__
            if not _allowed(package, target):
                offenders.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert offenders == []


#: The modules that may import zmq: the transport, and CURVE keys / ZAP in security.
ZMQ_MODULES = {"runtime/transport.py", "runtime/security.py", "runtime/keyfiles.py"}


def test_only_the_transport_and_security_import_zmq():
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in sorted(PACKAGE.rglob("*.py"))
        if str(path.relative_to(PACKAGE)) not in ZMQ_MODULES
        and any(name.split(".")[0] == "zmq" for name in _imports(path))
    ]
    assert offenders == []


def test_protocol_imports_no_io_no_clock_and_nothing_else_of_ours():
    offenders = []
    for path in _modules("protocol"):
        for name in _imports(path):
            top = name.split(".")[0]
            ours = _ours(name)
            if top in CLOCK or (
                ours is not None and ours.split(".")[0] not in ("protocol", "errors")
            ):
                offenders.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert offenders == []


def test_the_checker_sees_a_forbidden_import():
    """The rule above can fail: a router module that imports the client is caught."""
    probe = "from django_eventmq.client import connection\nfrom ..jobmanager import pool\n"
    targets = {_ours(name) for name in _imports_in(probe, ["django_eventmq", "router"])} - {None}
    assert {"client.connection", "jobmanager.pool"} <= targets
    assert not _allowed("router", "client.connection")
    assert _allowed("router", "scheduling.identity")
    assert not _allowed("router", "scheduling.api")


def _loaded_after(imports: list[str]) -> set[str]:
    code = (
        "import sys\n"
        + "".join(f"import {name}\n" for name in imports)
        + "print(' '.join(sorted(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent
    )
    return set(out.stdout.split())


def test_protocol_loads_neither_zmq_nor_django():
    loaded = _loaded_after(["django_eventmq.protocol"])
    assert "django_eventmq.protocol.messages" in loaded
    assert not {"zmq", "django"} & {name.split(".")[0] for name in loaded}


RUNTIME_MODULES = sorted(_dotted(path) for package in RUNTIME for path in _modules(package))


def test_every_runtime_module_loads_without_django():
    """One interpreter per package keeps this quick; each module is imported in turn."""
    for package in RUNTIME:
        modules = [m for m in RUNTIME_MODULES if m.split(".")[1] == package]
        loaded = _loaded_after(["django_eventmq", *modules])
        assert "django" not in {name.split(".")[0] for name in loaded}, f"{package}/ loads Django"


def test_the_router_loads_no_client_jobmanager_or_scheduler_code():
    modules = [m for m in RUNTIME_MODULES if m.split(".")[1] == "router"]
    loaded = _loaded_after(modules)
    foreign = sorted(
        name
        for name in loaded
        if name.startswith(("django_eventmq.client", "django_eventmq.jobmanager"))
        or name in ("django_eventmq.scheduling.api", "django_eventmq.scheduling.scheduler")
    )
    assert foreign == []


def test_no_pickle_or_eval_in_the_package():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        for needle in ("pickle.load", "eval(", "exec(", "marshal.load"):
            if needle in text:
                offenders.append(f"{path.relative_to(PACKAGE)}: {needle}")
    assert offenders == []
