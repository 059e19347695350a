"""``make demo``: bring the example site up on SQLite and show jobs run.

Starts ``emq_router``, ``emq_jobmanager`` and ``runserver`` from ``manage.py``,
signs a user up through the site's form (the view calls
``send_welcome.delay``), asks for a report (``build_report.delay``), waits for
the rows the jobs write and prints them. Then the site stays up until Ctrl-C
(``--once`` stops right away: used by the test of this command).
"""

from __future__ import annotations

import argparse
import http.cookiejar
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LOG_DIR = ROOT / "var" / "demo"


def say(text: str) -> None:
    print(f"==> {text}", flush=True)


def wait_until(check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """Poll ``check`` until it returns something truthy; exit with a message if it never does."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            sys.exit(f"demo: gave up after {timeout:.0f}s waiting for {what} (logs in {LOG_DIR})")
        time.sleep(0.1)


class Service:
    """One process of the demo, its output in var/demo/NAME.log."""

    def __init__(
        self, name: str, args: list[str], env: dict[str, str], log_dir: Path = LOG_DIR
    ) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self.log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        def check() -> re.Match[str] | None:
            if self.proc.poll() is not None:
                sys.exit(f"demo: {self.name} exited early; its log:\n{self.output()}")
            return re.search(pattern, self.output())

        return wait_until(check, f"{self.name} to print {pattern!r}", timeout)  # type: ignore[no-any-return]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def post_form(
    opener: urllib.request.OpenerDirector, base: str, path: str, data: dict[str, str]
) -> None:
    """GET the home page for a CSRF token, then POST ``data`` to ``path`` like a browser."""
    page = opener.open(base + "/").read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    if token is None:
        sys.exit("demo: the home page has no CSRF token; is the site up?")
    body = urllib.parse.urlencode({"csrfmiddlewaretoken": token.group(1), **data}).encode()
    # base is always http://127.0.0.1:PORT, built by main().
    request = urllib.request.Request(base + path, data=body, headers={"Referer": base + "/"})  # noqa: S310
    opener.open(request).read()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000, help="web server port (default 8000)")
    parser.add_argument("--once", action="store_true", help="stop after showing the jobs ran")
    options = parser.parse_args(argv)

    LOG_DIR.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="example_project.settings", PYTHONUNBUFFERED="1")
    env.setdefault("DATABASE_URL", f"sqlite:///{ROOT / 'var' / 'demo' / 'db.sqlite3'}")
    os.environ.update(env)

    say("migrating the SQLite database " + env["DATABASE_URL"])
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True
    )

    services: list[Service] = []
    try:
        say("starting emq_router, emq_jobmanager and runserver (logs in var/demo/)")
        router = Service("router", ["emq_router"], env)
        services.append(router)
        router.wait_for(r"router ready: ")
        jobmanager = Service("jobmanager", ["emq_jobmanager"], env)
        services.append(jobmanager)
        jobmanager.wait_for(r"jobmanager connected to ")
        base = f"http://127.0.0.1:{options.port}"
        web = Service("web", ["runserver", "--noreload", f"127.0.0.1:{options.port}"], env)
        services.append(web)

        opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
        )

        def site_up() -> bool:
            try:
                return bool(opener.open(base + "/", timeout=2).status == 200)
            except OSError:
                return False

        wait_until(site_up, f"the site at {base}")

        import django

        django.setup()
        from example_project.shop.models import Report, SentEmail

        emails_before, reports_before = SentEmail.objects.count(), Report.objects.count()
        stamp = time.strftime("%H%M%S")
        say(f"signing up demo-{stamp}@example.com through {base}/signup/ (queues send_welcome)")
        post_form(opener, base, "/signup/", {"email": f"demo-{stamp}@example.com"})
        say(f"asking for a report through {base}/report/ (queues build_report)")
        post_form(opener, base, "/report/", {"name": f"demo report {stamp}"})

        wait_until(
            lambda: (
                SentEmail.objects.count() > emails_before
                and Report.objects.count() > reports_before
            ),
            "the job manager to run both jobs",
        )
        say("the job manager ran them; rows the jobs wrote:")
        for email in SentEmail.objects.order_by("-id")[:3]:
            print(f"    SentEmail #{email.pk}: to={email.to} subject={email.subject!r}")
        for report in Report.objects.order_by("-id")[:3]:
            print(f"    Report #{report.pk}: name={report.name!r} rows={report.rows}")
        if options.once:
            return 0
        say(f"the site is up at {base}/ (status page {base}/status/); Ctrl-C stops everything")
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            say("stopping")
        return 0
    finally:
        for service in reversed(services):
            service.stop()


if __name__ == "__main__":
    sys.exit(main())
