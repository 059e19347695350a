"""The layer rule: protocol loads no zmq and no Django; core loads no Django."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import django_eventmq.core

PACKAGE = Path(__file__).resolve().parent.parent / "django_eventmq"


def _loaded_after(imports: list[str]) -> set[str]:
    code = (
        "import sys\n"
        + "".join(f"import {name}\n" for name in imports)
        + "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent
    )
    return set(out.stdout.split())


def test_protocol_loads_neither_zmq_nor_django():
    loaded = _loaded_after(["django_eventmq.protocol"])
    assert "django_eventmq" in loaded
    assert "zmq" not in loaded
    assert "django" not in loaded


CORE_MODULES = sorted(
    f"django_eventmq.core.{info.name}"
    for info in pkgutil.iter_modules(django_eventmq.core.__path__)
)


@pytest.mark.parametrize("module", ["django_eventmq", *CORE_MODULES])
def test_core_loads_no_django(module):
    loaded = _loaded_after([module])
    assert "django" not in loaded, f"{module} imported Django"


def test_no_pickle_or_eval_in_the_package():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        for needle in ("pickle.load", "eval(", "exec(", "marshal.load"):
            if needle in text:
                offenders.append(f"{path.relative_to(PACKAGE)}: {needle}")
    assert offenders == []
