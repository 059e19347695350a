"""The README's Quickstart, run as written in a new Django project, from a built wheel.

The wheel is built from this checkout (``pip wheel --no-deps``, like the
README) and installed into a fresh virtualenv with ``--no-deps``: its
dependencies (Django, pyzmq, croniter) come from the test environment through
a ``.pth`` line, so the test needs no network and takes seconds. The wheel's
declared dependencies are checked against that environment instead, and the
test makes sure ``django_eventmq`` is imported from the wheel, not from the
checkout.

Settings, the ``@job`` decorators and signatures, every ``./manage.py`` line
and the results example are taken from README.md's text, so editing the
Quickstart so that it no longer runs fails this test. Only the job bodies
(``...`` in the README) are the test's own: they leave a trace to check.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from tests.support import ROOT, Proc, clean_environ, run_checked, tcp_addr, wait_for

pytestmark = pytest.mark.slow

README = ROOT / "README.md"
#: How the README names the reader's checkout in its pip commands.
CHECKOUT = "/path/to/checkout"
#: What the wheel is built from (see pyproject.toml), copied: the build never writes into ROOT.
WHEEL_SOURCES = ("pyproject.toml", "README.md", "LICENSE", "django_eventmq")


def readme_section(title: str) -> str:
    text = README.read_text()
    start = text.index(title)
    heading = re.compile(r"^#{2,3} ", flags=re.M)  # "# ..." lines in code blocks are comments
    following = heading.search(text, start + len(title))
    return text[start : following.start() if following else len(text)]


QUICKSTART = readme_section("## Quickstart for an existing Django project")
RESULTS = readme_section("### Results, retries, timeouts, cancel")


def code_blocks(section: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


def block_with(section: str, language: str, marker: str) -> str:
    return next(block for block in code_blocks(section, language) if marker in block)


def console_commands(block: str) -> list[str]:
    """``$ command  # comment`` lines of a console block, without prompt and comment."""
    return [
        line[2:].split("  #")[0].strip() for line in block.splitlines() if line.startswith("$ ")
    ]


def build_wheel(tmp: Path) -> Path:
    source = tmp / "source"
    source.mkdir()
    for name in WHEEL_SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(path, source / name)
    dist = tmp / "dist"
    # The README's build command, with the checkout and dist/ replaced by ours.
    [command] = [
        c for c in console_commands(block_with(QUICKSTART, "console", "pip wheel")) if "wheel" in c
    ]
    ours = {CHECKOUT: str(source), "dist": str(dist)}
    args = [ours.get(arg, arg) for arg in shlex.split(command)]
    assert args[:2] == ["pip", "wheel"] and str(source) in args and str(dist) in args, command
    run_checked([sys.executable, "-m", *args], timeout=180)
    [wheel] = dist.glob("django_eventmq-*.whl")
    return wheel


def make_venv(tmp: Path, wheel: Path) -> Path:
    """A new virtualenv with the wheel installed; the test environment supplies its dependencies."""
    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    purelib = run_checked(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
    ).strip()
    # A plain path line (not addsitedir): the checkout's editable-install hook
    # in the test environment's site-packages is NOT activated.
    (Path(purelib) / "test-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run_checked(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", wheel]
    )
    return python


#: The test's job bodies: send_welcome leaves a file, build_report returns a value.
WELCOME_BODY = "    Path(__file__).with_name('welcome.json').write_text(json.dumps(user_id))\n"
REPORT_BODY = "    return len(name) * 100\n"


def quickstart_jobs() -> str:
    """myapp/jobs.py from the README's two jobs.py blocks, with the test's bodies."""
    welcome = block_with(QUICKSTART, "python", "# myapp/jobs.py").split("# myapp/views.py")[0]
    assert "\n    ...\n" in welcome, welcome
    welcome = welcome.replace("\n    ...\n", "\n" + WELCOME_BODY)
    report = block_with(RESULTS, "python", "def build_report").split("\n# anywhere")[0]
    report = report.replace("# myapp/jobs.py\n", "")
    assert report.rstrip().endswith(": ..."), report
    report = report.rstrip()[: -len(" ...")] + "\n" + REPORT_BODY
    return "import json\nfrom pathlib import Path\n\n" + welcome + "\n\n" + report


def quickstart_settings() -> str:
    """The README's settings block, applied to a startproject settings.py."""
    lines = []
    for line in block_with(QUICKSTART, "python", "# settings.py").splitlines():
        installed = re.fullmatch(r"INSTALLED_APPS = \[\.\.\., (.*)\]", line)
        if installed:
            # "[..., X]": the project's own list plus X, and the Quickstart's app.
            line = f"INSTALLED_APPS += [{installed.group(1)}, 'myapp']"
        lines.append(line)
    return "\n".join(lines) + "\n"


def results_script() -> str:
    """The README's results lines as a shell -c script that prints what they return."""
    usage = block_with(RESULTS, "python", "handle.wait(").split("\n# anywhere")[1]
    lines = ["from myapp.jobs import build_report, send_welcome", "send_welcome.delay(42)"]
    for line in usage.splitlines()[1:]:
        code = line.split("  #")[0].strip()
        if code.startswith("handle.wait("):
            code = f"print('WAIT', json.dumps({code}))"
        elif code.startswith("handle.status"):
            code = f"print('STATUS', json.dumps([{code}]))"
        if code:
            lines.append(code)
    # The job manager records outcomes in batches: wait (with a deadline) for the row.
    lines += [
        "deadline = time.monotonic() + 20",
        "while handle.status != 'succeeded' and time.monotonic() < deadline: time.sleep(0.05)",
        "print('FINAL', handle.status)",
    ]
    return "import json, time\n" + "\n".join(lines)


def test_readme_quickstart_runs_in_a_new_project_from_the_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stranger's shell has no PYTHONPATH into this checkout (an earlier test,
    # such as a Spark driver's, may have set one in this process).
    monkeypatch.delenv("PYTHONPATH", raising=False)
    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names
    assert b"License-Expression: LGPL-2.1-or-later" in metadata
    requires = re.findall(rb"^Requires-Dist: ([A-Za-z0-9_-]+)[^;\n]*$", metadata, flags=re.M)
    assert sorted(requires) == [b"Django", b"croniter", b"pyzmq"], requires

    python = make_venv(tmp_path, wheel)
    where = run_checked(
        [python, "-c", "import django_eventmq; print(django_eventmq.__file__)"], cwd=tmp_path
    )
    assert where.startswith(str(tmp_path / "venv")), where

    project = tmp_path / "site"
    project.mkdir()
    ports = {"FRONTEND": tcp_addr(), "BACKEND": tcp_addr()}
    env = {
        "PYTHONPATH": "",
        "DJANGO_SETTINGS_MODULE": "mysite.settings",
        # The README's way to give a site its own router ports.
        "EMQ_FRONTEND_ADDR": ports["FRONTEND"],
        "EMQ_BROKER_ADDR": ports["FRONTEND"],
        "EMQ_BACKEND_ADDR": ports["BACKEND"],
        "EMQ_WORKER_ADDR": ports["BACKEND"],
        "EMQ_ADMIN_ADDR": tcp_addr(),
    }

    def run(*args: str) -> str:
        return run_checked([python, *args], cwd=project, env={**clean_environ(), **env})

    run("-m", "django", "startproject", "mysite", ".")
    run("manage.py", "startapp", "myapp")
    (project / "myapp" / "jobs.py").write_text(quickstart_jobs())
    with (project / "mysite" / "settings.py").open("a") as settings:
        settings.write(quickstart_settings())

    commands = console_commands(block_with(QUICKSTART, "console", "emq_router"))
    assert [c.split()[1] for c in commands] == ["migrate", "emq_router", "emq_jobmanager"]
    run(*shlex.split(commands[0]))
    procs: list[Proc] = []
    try:
        for command, ready in zip(
            commands[1:], (r"router ready: ", r"jobmanager connected to "), strict=True
        ):
            proc = Proc([str(python), *shlex.split(command)], env=env, cwd=project)
            procs.append(proc)
            proc.wait_output(ready, timeout=30)

        out = run("manage.py", "shell", "-c", results_script())
        assert "WAIT 700" in out, out  # len("monthly") * 100, computed by the job manager
        status = json.loads(out.split("STATUS ", 1)[1].splitlines()[0])
        # Read without error (it needs the migrated tables); None until the row is written.
        assert status[0] in {None, "queued", "running", "succeeded"}, out
        assert "FINAL succeeded" in out, out
        welcome = project / "myapp" / "welcome.json"
        wait_for(welcome.exists, 30, "send_welcome to run on the job manager")
        assert json.loads(welcome.read_text()) == 42
        logs = "".join(p.output() for p in procs)
        assert "Traceback" not in logs, logs
    finally:
        for proc in procs:
            proc.stop()
