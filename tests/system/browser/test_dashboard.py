"""The admin dashboard in a real headless Chromium (Debian's), driven by Playwright.

The example site runs for real: ``manage.py emq_router``, ``emq_jobmanager``
(recording every result, so a failing job leaves a row) and ``runserver`` on
a migrated SQLite file. The test logs in as staff, waits for live numbers,
failures and chart lines to appear, and saves a screenshot to
``var/artifacts/dashboard.png``.

Needs ``apt-get install -y chromium`` and ``pip install playwright`` (no
``playwright install``: the system Chromium is used); skipped without them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from django_eventmq.client.connection import Client
from django_eventmq.protocol import Request, new_msgid, parse_headers
from tests.support import ROOT, Proc, free_port

CHROMIUM = os.environ.get("EMQ_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = ROOT / "var" / "artifacts"
ANY = "tcp://127.0.0.1:*"
PASSWORD = "dashboard-test-password"

playwright_sync = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
)
if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
    pytest.skip(
        f"no Chromium at {CHROMIUM} (apt-get update && apt-get install -y chromium)",
        allow_module_level=True,
    )


def manage(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "manage.py"), *args]


def _environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}


def site_env(db: Path) -> dict[str, str]:
    """The example site's environment on the SQLite database ``db``."""
    return {
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
        "DATABASE_URL": f"sqlite:///{db}",
        "DEBUG": "true",
        "PYTHONPATH": str(ROOT),
    }


def prepare_site(env: dict[str, str], setup: str = "") -> None:
    """Migrate the site and make the admin user, then run ``setup`` in its shell."""
    script = (
        "from django.contrib.auth.models import User\n"
        f"User.objects.create_superuser('admin', 'admin@example.com', {PASSWORD!r})\n" + setup
    )
    for args in (("migrate", "--noinput"), ("shell", "-c", script)):
        done = subprocess.run(
            manage(*args),
            cwd=ROOT,
            env={**_environ(), **env},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def example_site(tmp_path: Path) -> Iterator[tuple[str, Client]]:
    """The example site with a router, a job manager and runserver; (base URL, client)."""
    db = tmp_path / "site.sqlite3"
    env = site_env(db)
    prepare_site(
        env,
        "from django_eventmq.models.schedules import Schedule\n"
        "Schedule(name='nightly digest', path='tests.system.ops.jobs', callable='noop', "
        "interval=3600, nohaste=True).save()\n"
        "Schedule(name='cache warm-up', path='tests.system.ops.jobs', callable='noop', args=[1], "
        "interval=300, nohaste=True).save()\n",
    )
    procs: list[Proc] = []
    client: Client | None = None
    try:
        router = Proc(
            manage("emq_router", "--frontend", ANY, "--backend", ANY, "--admin", ANY),
            env={**env, "EMQ_JOURNAL_PATH": str(tmp_path / "journal.sqlite3")},
        )
        procs.append(router)
        ready = router.wait_output(r"router ready: frontend=(\S+) backend=(\S+) admin=(\S+)")
        frontend, backend, admin = ready.groups()
        jobmanager = Proc(
            manage(
                "emq_jobmanager",
                "--broker", backend, "--queues", "email:30,reports:10,default:10",
                "--concurrency", "2", "--job-module", "tests.system.ops.jobs",
            ),
            env={**env, "EMQ_RECORD_ALL_RESULTS": "true"},
        )  # fmt: skip
        procs.append(jobmanager)
        jobmanager.wait_output(r"jobmanager connected")
        port = free_port()
        server = Proc(
            manage("runserver", f"127.0.0.1:{port}", "--noreload"),
            env={**env, "EMQ_ADMIN_ADDR": admin},
        )
        procs.append(server)
        server.wait_output(r"Quit the server with", timeout=60)
        client = Client(frontend)
        yield f"http://127.0.0.1:{port}", client
    finally:
        if client is not None:
            client.channel.close()
        for proc in reversed(procs):
            proc.stop()


def send(client: Client, queue: str, callable_: str, *args: object) -> None:
    body = json.dumps(
        [
            "run",
            {
                "path": "tests.system.ops.jobs",
                "callable": callable_,
                "args": list(args),
                "kwargs": {},
            },
        ]
    )
    client.send(Request(msgid=new_msgid(), queue=queue, headers=parse_headers(""), body_text=body))


#: True once the page shows a live router with processed jobs, a failure link and chart lines.
LIVE = """() => {
  const root = document.getElementById('emq-dashboard');
  return root && Number(root.dataset.polls) >= 3
    && document.getElementById('emq-state').className === 'emq-live'
    && Number(document.getElementById('emq-processed').textContent) >= 20
    && Number(document.getElementById('emq-workers').textContent) === 1
    && document.querySelector('#emq-failures a') !== null
    && document.querySelectorAll('#emq-rate-chart polyline').length >= 3
    && document.querySelectorAll('#emq-schedules tr').length === 2;
}"""


#: How the breadcrumbs bar is drawn: its computed background, padding and text colour.
BREADCRUMBS = """() => {
  const style = getComputedStyle(
    document.querySelector('nav[aria-label="Breadcrumbs"] .breadcrumbs'));
  return {background: style.backgroundColor, padding: style.padding, color: style.color};
}"""


#: True once the jobs table shows the held job running, with a worker process's pid.
HELD_RUNNING = """() => [...document.querySelectorAll('#emq-jobs tr')].some(tr => {
  const cells = [...tr.cells].map(td => td.textContent);
  return cells[1] === 'tests.system.ops.jobs.hold' && cells[4] === 'running'
    && /^[0-9]+$/.test(cells[5]);
})"""


def test_the_dashboard_shows_live_numbers_in_a_real_browser(example_site, tmp_path):
    base, client = example_site
    for n in range(20):
        send(client, ("email", "reports", "default")[n % 3], "noop", n)
    send(client, "email", "boom", "smtp down")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "dashboard.png"
    with playwright_sync.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1100})
            page.goto(f"{base}/admin/login/?next=/admin/django_eventmq/dashboard/")
            page.fill("#id_username", "admin")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_url("**/admin/django_eventmq/dashboard/")
            # More jobs while the page polls, so the throughput chart has a rise.
            page.wait_for_function(
                "() => Number(document.getElementById('emq-dashboard').dataset.polls) >= 1"
            )
            for n in range(30):
                send(client, "email", "noop", n)
            page.wait_for_function(LIVE, timeout=45_000)
            # A job running now is a row of the jobs table, with its worker process.
            release = tmp_path / "release"
            send(client, "default", "hold", str(release))
            try:
                page.wait_for_function(HELD_RUNNING, timeout=45_000)
            finally:
                release.touch()
            assert page.text_content("#emq-state").startswith("live: router tcp://127.0.0.1:")
            failure = page.locator("#emq-failures a").first
            assert "tests.system.ops.jobs.boom" in page.text_content("#emq-failures")
            assert "ValueError: smtp down" in page.text_content("#emq-failures")
            schedules = page.text_content("#emq-schedules")
            assert schedules.index("cache warm-up") < schedules.index("nightly digest")
            page.screenshot(path=str(shot), full_page=True)
            print(f"dashboard screenshot: {shot}")
            crumbs = page.evaluate(BREADCRUMBS)
            # The failure links to its result row in the admin.
            failure.click()
            page.wait_for_url("**/admin/django_eventmq/jobresult/*/change/")
            assert "ValueError" in page.text_content("#content")
            # The dashboard's breadcrumbs bar is drawn as the admin's own (an unstyled
            # one was transparent, with no padding, in the page's text colour).
            admins = page.evaluate(BREADCRUMBS)
            assert admins["background"] not in ("rgba(0, 0, 0, 0)", "transparent"), admins
            assert crumbs == admins
        finally:
            browser.close()
    assert shot.stat().st_size > 10_000
