"""``make demo``: bring the example site up on SQLite and show jobs run.

Starts ``emq_router``, ``emq_jobmanager`` and ``runserver`` from ``manage.py``,
signs a user up through the site's form (the view calls
``send_welcome.delay``), asks for a report (``build_report.delay``), waits for
the rows the jobs write and prints them. It makes an admin user ``demo`` with
a new password each run, logs in with it and prints both. Then the site stays
up until Ctrl-C (``--once`` stops right away: used by the test of this command).

The web server's port is ``--port`` (``make demo PORT=8017``); a taken port is
reported at once. The router uses its default ports unless one is taken (then
free ones, said so) or ``EMQ_*`` addresses are set in the environment.
"""

from __future__ import annotations

import argparse
import http.cookiejar
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django_eventmq.protocol import constants as C

ROOT = Path(__file__).resolve().parent.parent
LOG_DIR = ROOT / "var" / "demo"
#: The admin user the demo makes (its password is new each run).
ADMIN_USER = "demo"
#: Router address settings (EMQ_*), each with its default.
ROUTER_DEFAULTS = {
    "FRONTEND": C.DEFAULT_FRONTEND_ADDR,
    "BACKEND": C.DEFAULT_BACKEND_ADDR,
    "ADMIN": C.DEFAULT_ADMIN_ADDR,
}
#: Client-side settings that must name the same sockets as the router's.
CONNECTS_TO = {"FRONTEND": "BROKER", "BACKEND": "WORKER"}


def say(text: str) -> None:
    print(f"==> {text}", flush=True)


def wait_until(
    check: Callable[[], Any],
    what: str | Callable[[], str],
    timeout: float = 60.0,
    logs: Path = LOG_DIR,
) -> Any:
    """Poll ``check`` until it returns something truthy; exit with a message if it never
    does (``what`` may be a callable: what is still missing, said when giving up)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            sys.exit(f"demo: gave up after {timeout:.0f}s waiting for {said} (logs in {logs})")
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

        what = f"{self.name} to print {pattern!r}"
        return wait_until(check, what, timeout, self.log_path.parent)  # type: ignore[no-any-return]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def post_form(
    opener: urllib.request.OpenerDirector,
    base: str,
    path: str,
    data: dict[str, str],
    form_page: str = "/",
) -> None:
    """GET ``form_page`` for a CSRF token, then POST ``data`` to ``path`` like a browser."""
    page = opener.open(base + form_page).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    if token is None:
        sys.exit(f"demo: {base}{form_page} has no CSRF token; is it the demo's site?")
    body = urllib.parse.urlencode({"csrfmiddlewaretoken": token.group(1), **data}).encode()
    # base is always http://127.0.0.1:PORT, built by main().
    request = urllib.request.Request(base + path, data=body, headers={"Referer": base + "/"})  # noqa: S310
    opener.open(request).read()


def port_taken(port: int) -> bool:
    """True if something listens on 127.0.0.1:``port`` (bound as runserver binds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def router_addresses(environ: dict[str, str]) -> dict[str, str]:
    """EMQ_* addresses for the demo's processes when the router's default ports are taken.

    Empty (the defaults, or what the environment sets) when they are free or
    any router address is set already.
    """
    if any(f"EMQ_{name}_ADDR" in environ for name in [*ROUTER_DEFAULTS, *CONNECTS_TO.values()]):
        return {}
    taken = [addr for addr in ROUTER_DEFAULTS.values() if port_taken(int(addr.rsplit(":", 1)[1]))]
    if not taken:
        return {}
    chosen = {name: f"tcp://127.0.0.1:{free_port()}" for name in ROUTER_DEFAULTS}
    say(
        f"router ports taken ({', '.join(taken)}: another router?); the demo's router uses "
        + ", ".join(f"{name.lower()}={addr}" for name, addr in chosen.items())
    )
    addresses = {f"EMQ_{name}_ADDR": addr for name, addr in chosen.items()}
    for name, client_side in CONNECTS_TO.items():
        addresses[f"EMQ_{client_side}_ADDR"] = chosen[name]
    return addresses


def make_admin_user() -> str:
    """Create (or reset) the superuser ``demo``; returns its new password."""
    from django.contrib.auth import get_user_model

    password = secrets.token_urlsafe(12)
    user, _ = get_user_model().objects.get_or_create(
        username=ADMIN_USER, defaults={"email": "demo@example.com"}
    )
    user.is_staff = user.is_superuser = True
    user.set_password(password)
    user.save()
    return password


def admin_login(opener: urllib.request.OpenerDirector, base: str, password: str) -> None:
    """Log in as the demo user and check the app's admin index links the dashboard."""
    index = "/admin/django_eventmq/"
    post_form(
        opener,
        base,
        f"/admin/login/?next={index}",
        {"username": ADMIN_USER, "password": password, "next": index},
        form_page="/admin/login/",
    )
    page = opener.open(base + index).read().decode()
    if f"{index}dashboard/" not in page:
        sys.exit(f"demo: logging in as {ADMIN_USER} did not reach {index} (logs in {LOG_DIR})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--port", type=int, default=8000, help="web server port on 127.0.0.1 (default 8000)"
    )
    parser.add_argument("--once", action="store_true", help="stop after showing the jobs ran")
    options = parser.parse_args(argv)

    if port_taken(options.port):
        sys.exit(
            f"demo: port {options.port} on 127.0.0.1 is taken (another web server?); "
            f"choose a free one: make demo PORT={options.port + 17} "
            f"(or scripts/demo.sh --port {options.port + 17})"
        )
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="example_project.settings", PYTHONUNBUFFERED="1")
    env.setdefault("DATABASE_URL", f"sqlite:///{ROOT / 'var' / 'demo' / 'db.sqlite3'}")
    env.update(router_addresses(env))
    os.environ.update(env)

    say("migrating the SQLite database " + env["DATABASE_URL"])
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True
    )
    import django

    django.setup()
    password = make_admin_user()

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
            if web.proc.poll() is not None:
                sys.exit(f"demo: the web server exited early; its log:\n{web.output()}")
            try:
                return bool(opener.open(base + "/", timeout=2).status == 200)
            except OSError:
                return False

        wait_until(site_up, f"the site at {base}")

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
        admin_login(opener, base, password)
        say(
            f"admin: {base}/admin/ user {ADMIN_USER!r} password {password!r} (new each run); "
            f"dashboard: {base}/admin/django_eventmq/dashboard/"
        )
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
