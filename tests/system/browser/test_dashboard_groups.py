"""The admin dashboard's router table in a real headless Chromium: both routers of a group on
PostgreSQL, which one leads, and the other one leading after SIGTERM of the leader; the
table is drawn by dashboard.js from the one data URL the page polls.

The example site runs ``runserver`` with ``EMQ_STATUS_ADMIN_ADDRS`` naming both members'
admin addresses. Needs Chromium, Playwright and PostgreSQL (skipped without them, as
``test_dashboard.py`` and ``tests/pg_support.py`` say); saves
``var/artifacts/dashboard_groups.png``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pg_support import pg_dsn, pg_group  # noqa: F401 - fixtures
from tests.support import Proc, free_port, wait_for
from tests.system.browser.test_dashboard import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    PASSWORD,
    manage,
    playwright_sync,
    prepare_site,
    site_env,
)
from tests.system.ha_group.support import Group

# A group whose lease (120 s) outlasts the test: after SIGTERM B leads because A released it.
from tests.system.ha_group.test_group_edges import group  # noqa: F401 - fixture

pytestmark = pytest.mark.postgres

#: The router table's rows as [shard, group, address, role, epoch] by address.
ROWS = """() => Object.fromEntries(
  Array.from(document.querySelectorAll('#emq-routers tr')).map(tr => {
    const cells = Array.from(tr.children).map(td => td.textContent);
    return [cells[2], cells.slice(0, 5)];
  }))"""

#: Each router row's role cell colour, by address.
ROLE_COLOURS = """() => Object.fromEntries(
  Array.from(document.querySelectorAll('#emq-routers tr')).map(tr =>
    [tr.children[2].textContent, getComputedStyle(tr.children[3]).color]))"""


@pytest.fixture
def server(group: Group, tmp_path: Path) -> Iterator[str]:  # noqa: F811
    """runserver of the example site reading both members; its base URL."""
    env = site_env(tmp_path / "site.sqlite3")
    prepare_site(env)
    port = free_port()
    proc = Proc(
        manage("runserver", f"127.0.0.1:{port}", "--noreload"),
        env={**env, "EMQ_STATUS_ADMIN_ADDRS": f"{group.a.admin},{group.b.admin}"},
    )
    try:
        proc.wait_output(r"Quit the server with", timeout=60)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.stop()


def test_the_router_table_shows_the_leader_and_then_the_new_leader(group, server):  # noqa: F811
    a, b = group.a.admin, group.b.admin
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "dashboard_groups.png"
    with playwright_sync.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1100})
            polled: list[str] = []  # what the page's script fetches
            page.on(
                "request",
                lambda r: polled.append(r.url) if r.resource_type == "fetch" else None,
            )
            page.goto(f"{server}/admin/login/?next=/admin/django_eventmq/dashboard/")
            page.fill("#id_username", "admin")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_url("**/admin/django_eventmq/dashboard/")
            page.wait_for_function(
                "() => document.querySelectorAll('#emq-routers tr').length === 2", timeout=30_000
            )
            rows = page.evaluate(ROWS)
            assert rows[a] == ["1", group.group, a, "leader", "1"]
            assert rows[b] == ["1", group.group, b, "standby", "1"]
            assert page.text_content("#emq-state").startswith("live: router ")
            page.screenshot(path=str(shot), full_page=True)
            print(f"dashboard screenshot: {shot}")

            assert group.a.proc.stop() == 0  # SIGTERM: A releases the lease
            wait_for(lambda: group.b.role() == "leader", 30, "B to lead after A's SIGTERM")
            page.wait_for_function(
                f"() => ({ROWS})()[{b!r}][3] === 'leader'"
                f" && ({ROWS})()[{a!r}][3] === 'unreachable'",
                timeout=30_000,
            )
            rows = page.evaluate(ROWS)
            assert rows[b][4] == "2"  # the new epoch
            # dashboard.css colours the roles: the unreachable member red, the leader green.
            colours = page.evaluate(ROLE_COLOURS)
            assert colours[a] == "rgb(198, 40, 40)"
            assert colours[b] == "rgb(46, 125, 50)"
            page.screenshot(path=str(ARTIFACTS / "dashboard_groups_failover.png"), full_page=True)
            shard = page.text_content("#emq-shards")
            assert b in shard
            assert a not in shard
            assert page.text_content("#emq-state").startswith("live: router ")
            # One URL polled: the router table comes from the data view, drawn by dashboard.js.
            assert polled
            assert {url.removeprefix(server) for url in polled} == {
                "/admin/django_eventmq/dashboard/data/"
            }
        finally:
            browser.close()
    assert shot.stat().st_size > 10_000
