"""Each part owns its state: no class re-declares attributes another class sets.

A mixin spread over files declared its host's attributes (``book: Book`` in the
class body, or a block of them under ``if TYPE_CHECKING:``) so that its methods
type-checked, while another file's class set them. Issue 31 made each part an
object that owns what it uses; these checks keep it so:

- no ``if TYPE_CHECKING:`` inside a class body;
- an attribute a class declares without a value (``name: Type``) is one the
  class sets itself (``self.name = ...`` in one of its own methods), unless the
  class is a record whose declarations *are* its fields (dataclass, NamedTuple,
  TypedDict, Protocol, an enum, a Django model or form, an exception).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "django_eventmq"

#: Bases and decorators whose class-body declarations are fields, not borrowed state.
RECORD_BASES = {
    "NamedTuple",
    "TypedDict",
    "Protocol",
    "Enum",
    "IntEnum",
    "StrEnum",
    "Flag",
    "Model",
    "Form",
    "ModelForm",
    "ModelAdmin",
    "AppConfig",
    "BaseCommand",
    "Exception",
    "Generic",
}


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Subscript):
        return _name(node.value)
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        return _name(node.func)
    return ""


def _is_record(cls: ast.ClassDef) -> bool:
    if any(_name(d) in {"dataclass", "dataclasses.dataclass"} for d in cls.decorator_list):
        return True
    bases = {_name(b) for b in cls.bases}
    return bool(bases & RECORD_BASES) or any(b.endswith(("Error", "Exception")) for b in bases)


def _set_on_self(cls: ast.ClassDef) -> set[str]:
    """Names the class's own methods assign as ``self.<name>`` (or ``cls.<name>``, or
    on an instance a classmethod made with ``cls(...)``)."""
    names: set[str] = set()
    own = {"self", "cls"}
    for node in ast.walk(cls):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and _name(node.value.func) == "cls"
        ):
            own.update(t.id for t in node.targets if isinstance(t, ast.Name))
    for node in ast.walk(cls):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        for target in targets:
            for part in ast.walk(target):
                if (
                    isinstance(part, ast.Attribute)
                    and isinstance(part.value, ast.Name)
                    and part.value.id in own
                ):
                    names.add(part.attr)
    return names


def _sets_by_name(cls: ast.ClassDef) -> bool:
    """True if the class's own methods call ``setattr(self, ...)``."""
    return any(
        isinstance(node, ast.Call)
        and _name(node.func) == "setattr"
        and node.args
        and isinstance(node.args[0], ast.Name)
        and node.args[0].id == "self"
        for node in ast.walk(cls)
    )


def problems(source: str, where: str) -> Iterator[str]:
    """What in ``source`` breaks the rule, one line each."""
    for cls in (n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)):
        for stmt in cls.body:
            if isinstance(stmt, ast.If) and _name(stmt.test) == "TYPE_CHECKING":
                yield f"{where}:{stmt.lineno}: class {cls.name} has an `if TYPE_CHECKING:` block"
        if _is_record(cls):
            continue
        declared = [
            stmt
            for stmt in cls.body
            if isinstance(stmt, ast.AnnAssign)
            and stmt.value is None
            and isinstance(stmt.target, ast.Name)
            and _name(stmt.annotation) != "ClassVar"
        ]
        if not declared:
            continue
        if _sets_by_name(cls):
            continue  # its own methods set attributes by name (setattr(self, point, ...))
        own = _set_on_self(cls)
        for stmt in declared:
            assert isinstance(stmt.target, ast.Name)
            if stmt.target.id not in own:
                yield (
                    f"{where}:{stmt.lineno}: class {cls.name} declares {stmt.target.id!r} "
                    "but never sets it: whose state is it?"
                )


def test_no_class_declares_state_another_class_sets() -> None:
    found = [
        line
        for path in sorted(PACKAGE.rglob("*.py"))
        if "migrations" not in path.parts
        for line in problems(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert not found, "\n".join(found)


def test_the_check_finds_a_mixin_that_borrows_its_hosts_state() -> None:
    mixin = (
        "from typing import TYPE_CHECKING\n"
        "class Acks:\n"
        "    book: Book\n"
        "    _acks: list\n"
        "    if TYPE_CHECKING:\n"
        "        def _flush(self) -> None: ...\n"
        "    def sync(self):\n"
        "        self._acks = []\n"
        "        self.book.commit()\n"
    )
    found = list(problems(mixin, "m.py"))
    assert found == [
        "m.py:5: class Acks has an `if TYPE_CHECKING:` block",
        "m.py:3: class Acks declares 'book' but never sets it: whose state is it?",
    ]
    part = (
        "from dataclasses import dataclass\n"
        "@dataclass\n"
        "class Parcel:\n"
        "    seq: int\n"
        "class Acks:\n"
        "    book: Book\n"
        "    def __init__(self, book):\n"
        "        self.book = book\n"
    )
    assert list(problems(part, "p.py")) == []
