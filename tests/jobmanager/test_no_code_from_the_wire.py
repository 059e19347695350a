"""Nothing in the package can turn wire data into code: no pickle-like loaders,
no eval/exec/compile/__import__.

Complements tests/test_layers.py::test_no_pickle_or_eval_in_the_package with
import-level and call-level patterns (so ``x.compile(`` or a docstring saying
"unpickled" do not count, but ``import pickle`` or ``from marshal import loads`` do).
"""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "django_eventmq"

UNSAFE_IMPORT = re.compile(
    r"^\s*(?:import|from)\s+(?:pickle|_pickle|cPickle|marshal|shelve|dill|cloudpickle|"
    r"jsonpickle|yaml)\b",
    re.MULTILINE,
)
UNSAFE_CALL = re.compile(
    r"(?<![.\w])(?:eval|exec|compile|__import__)\s*\(|\b(?:pickle|marshal|yaml)\.\w*load"
)


def _offenders(pattern: re.Pattern[str]) -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for match in pattern.finditer(path.read_text()):
            found.append(f"{path.relative_to(PACKAGE)}: {match.group(0).strip()}")
    return found


def test_no_unsafe_deserialisers_are_imported() -> None:
    assert _offenders(UNSAFE_IMPORT) == []


def test_no_eval_exec_compile_or_dunder_import() -> None:
    assert _offenders(UNSAFE_CALL) == []


def test_patterns_catch_what_they_are_for() -> None:
    assert UNSAFE_IMPORT.search("import pickle\n")
    assert UNSAFE_IMPORT.search("    from marshal import loads\n")
    assert UNSAFE_CALL.search("x = eval(text)")
    assert UNSAFE_CALL.search("pickle.loads(data)")
    assert UNSAFE_CALL.search("__import__(name)")
    assert not UNSAFE_CALL.search("re.compile(r'x')")
    assert not UNSAFE_CALL.search("nothing is ever unpickled or evaluated")
