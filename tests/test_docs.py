"""The documentation site builds with warnings as errors, and the architecture page
(docs/architecture.md and its picture) names the code as it is."""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from tests.support import ROOT

PACKAGE = ROOT / "django_eventmq"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
PICTURE = ROOT / "docs" / "_static" / "architecture.svg"
#: Packages whose every module the architecture page names: the ones a process runs.
PROCESS_PACKAGES = ("protocol", "runtime", "router", "jobmanager", "client", "scheduling", "pubsub")


def test_docs_build_without_warnings(tmp_path):
    pytest.importorskip("sphinx", reason="sphinx is in the test extra: install it to build")
    pytest.importorskip("myst_parser", reason="myst-parser is in the test extra")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            "docs",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "index.html").exists()
    assert (tmp_path / "api.html").exists()
    assert (tmp_path / "architecture.html").exists()
    assert (tmp_path / "_images" / "architecture.svg").exists()


def spans(text: str) -> list[str]:
    """The text of every inline code span (one may go on over a line break), outside
    fenced blocks."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", text)]


def named_paths(text: str) -> set[str]:
    """Every file or folder path in backticks: ``router/book.py``, ``client/``, and
    each path of ``tests/a tests/b``; ``path.py: name`` counts as ``path.py``."""
    found = set()
    for span in spans(text):
        for word in span.split(":")[0].split():
            if re.fullmatch(r"[\w*./]+(\.py|/)", word) or word.startswith("tests/"):
                found.add(word)
    return found


def exists(path: str) -> bool:
    """True if ``path`` is a file or folder of the repository (from its root), or the
    tail of one in the package or the tests (``book.py``, ``journal/store.py``,
    ``fuzz/``); ``*`` globs."""
    path = path.rstrip("/")
    return any(ROOT.glob(path)) or any(any(base.rglob(path)) for base in (PACKAGE, ROOT / "tests"))


def test_every_path_the_architecture_page_names_exists():
    missing = sorted(p for p in named_paths(ARCHITECTURE.read_text()) if not exists(p))
    assert missing == [], f"docs/architecture.md names paths that are gone: {missing}"


def named_code(text: str) -> list[tuple[str, str]]:
    """``(path, dotted name)`` of each ``path.py: Name.attr()`` in backticks."""
    found = []
    for span in spans(text):
        match = re.fullmatch(r"([\w/]+\.py): ([\w.]+)(?:\(\))?", span)
        if match:
            found.append((match.group(1), match.group(2)))
    return found


def defines(path: str, dotted: str) -> bool:
    """True if the module at ``path`` (a tail, as :func:`exists` takes it) defines
    every part of ``dotted`` (a class, a function or method, or an assigned name)."""
    exact = PACKAGE / path
    tails = [m for m in PACKAGE.rglob("*.py") if str(m).endswith("/" + path)]
    (module,) = [exact] if exact.is_file() else tails
    source = module.read_text()
    return all(
        re.search(rf"^\s*((def|class)\s+{part}\b|{part}\s*[:=])", source, re.M)
        for part in dotted.split(".")
    )


def test_every_function_the_job_path_names_is_where_the_page_says():
    named = named_code(ARCHITECTURE.read_text())
    assert len(named) > 15
    wrong = sorted(f"{path}: {name}" for path, name in named if not defines(path, name))
    assert wrong == [], f"docs/architecture.md names code that is not there: {wrong}"


def package_section(text: str, package: str) -> str:
    """The part of the page that starts with a line opening with ``package/`` in
    backticks and runs to the next such line or heading ("" if there is none)."""
    found = re.search(rf"^`{re.escape(package)}/`.*?(?=^`[\w/]+/`|^#)", text, re.M | re.S)
    return found.group(0) if found else ""


def unnamed_modules(text: str) -> list[str]:
    """The modules of the process packages that the page does not name in their
    package's own part: ``status.py`` under ``cli/`` does not name
    ``protocol/status.py`` (several packages have a ``status.py``, a
    ``session.py``, an ``api.py``...)."""
    return [
        str(path.relative_to(PACKAGE))
        for package in PROCESS_PACKAGES
        for path in sorted((PACKAGE / package).rglob("*.py"))
        if path.name != "__init__.py"
        and not re.search(rf"\b{re.escape(path.name)}\b", package_section(text, package))
    ]


def test_the_architecture_page_names_every_package_and_every_process_module():
    text = ARCHITECTURE.read_text()
    packages = sorted(
        str(init.parent.relative_to(PACKAGE)) for init in PACKAGE.rglob("__init__.py")
    )
    assert "router/journal" in packages
    unnamed = [p for p in packages if p != "." and f"{p}/" not in text]
    assert len(unnamed_modules("")) > 60  # what an empty page misses: the check reads them all
    unnamed += unnamed_modules(text)
    assert unnamed == [], f"say in docs/architecture.md what these are: {unnamed}"


def test_the_checks_above_can_fail():
    assert named_paths("`router/gone.py: Thing.x` and `tests/a tests/b` and `x.y`") == {
        "router/gone.py",
        "tests/a",
        "tests/b",
    }
    assert not exists("router/gone.py")
    assert exists("journal/store.py") and exists("tests/system/fuzz") and exists("fuzz/")
    assert exists("management/commands/emq_*.py")
    page = (
        "```\n`x.py: a`\n```\n`router/book.py: Book.accept()` `jobmanager/pool.py:\n Pool.assign`"
    )
    assert named_code(page) == [
        ("router/book.py", "Book.accept"),
        ("jobmanager/pool.py", "Pool.assign"),
    ]
    assert defines("router/book.py", "Book.accept") and not defines("router/book.py", "Book.gone")
    # A module named only in another package's part (a namesake) is not named.
    page = ARCHITECTURE.read_text()
    assert unnamed_modules(page) == []
    protocol = package_section(page, "protocol")
    assert "`status.py`" in protocol and "`status.py`" in package_section(page, "cli")
    without = page.replace(protocol, protocol.replace("`status.py`", "`gone.py`"))
    assert unnamed_modules(without) == ["protocol/status.py"]


def test_the_architecture_picture_shows_the_sockets_and_the_packages():
    svg = ET.parse(PICTURE).getroot()
    words = " ".join(t.strip() for t in svg.itertext())
    for port in (":47291", ":47290", ":47293", ":47298", ":47299"):
        assert port in words, port
    for package in ("client/", "contrib/spark/", "scheduling/", "cli/", "router/", "jobmanager/"):
        assert package in words, package
    assert "](_static/architecture.svg)" in ARCHITECTURE.read_text()
