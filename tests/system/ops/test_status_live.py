"""``emq_status`` / ``python -m django_eventmq status`` against a real router and job manager."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import signal
import subprocess
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from django_eventmq.cli import admin_client, status
from tests.support import ROOT, Proc, free_port, python_module, wait_for


def router_status(site) -> dict:
    return admin_client.ask(site.admin, "STATUS", 5.0)


def run_status(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        python_module("status", *args),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )


def test_the_table_shows_queues_and_the_job_manager(site):
    before = router_status(site)["processed_messages_by_queue"].get("email", 0)
    for n in range(3):
        site.send("email", "noop", n)
    wait_for(
        lambda: router_status(site)["processed_messages_by_queue"].get("email", 0) >= before + 3,
        30,
        "three email jobs processed",
    )
    done = run_status("--admin", site.admin)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert re.fullmatch(
        r"router tcp://127\.0\.0\.1:\d+ at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", lines[0]
    )
    email = next(line.split() for line in lines if line.startswith("email "))
    assert email[0:3] == ["email", "0", "0"]  # nothing waiting, nothing in flight
    assert int(email[4]) >= before + 3
    manager = next(line.split() for line in lines if line.startswith("jm-"))
    assert manager[1] == "email:30,default:10"
    assert manager[-1] == "ago"  # a heartbeat age, heard moments ago
    assert "no schedulers connected" in lines


def test_json_shows_a_job_in_flight_and_its_job_manager(site, tmp_path):
    flag = tmp_path / "release"
    site.send("default", "hold", str(flag))
    wait_for(
        lambda: router_status(site)["inflight_messages_by_queue"].get("default") == 1,
        30,
        "the hold job in flight",
    )
    try:
        out = io.StringIO()
        call_command("emq_status", admin=site.admin, json=True, stdout=out)
        summary = json.loads(out.getvalue())
        rows = {q["queue"]: q for q in summary["queues"]}
        assert rows["default"]["in_flight"] == 1
        assert rows["default"]["age_max_ms"] >= 0
        (manager,) = summary["job_managers"]
        assert manager["in_flight"] == 1
        assert manager["queues"] == [[30, "email"], [10, "default"]]
        assert summary["reachable"] is True
    finally:
        flag.touch()
    wait_for(
        lambda: not router_status(site)["inflight_messages_by_queue"].get("default"),
        30,
        "the hold job finished",
    )


def test_monitor_adds_the_journal_state(site):
    done = run_status("--admin", site.admin, "--monitor")
    assert done.returncode == 0, done.stderr
    section = done.stdout.split("monitor:\n", 1)[1]
    assert re.search(r"^store_bytes: \d+$", section, re.M)
    assert re.search(r"^syncs: \d+$", section, re.M)
    assert re.search(r"^poisoned: 0$", section, re.M)


def test_watch_prints_frames_until_ctrl_c(site):
    proc = Proc(python_module("status", "--admin", site.admin, "--watch", "--interval", "0.2"))
    try:
        proc.wait_output(r"(?s)(router tcp://\S+ at [^\n]+\n.*){2}")
        proc.signal(signal.SIGINT)
        assert proc.popen.wait(15) == 0
    finally:
        proc.stop()
    frames = re.findall(r"^router tcp://\S+ at ", proc.output(), re.M)
    assert len(frames) >= 2
    assert "\x1b[" not in proc.output()  # not a terminal: frames follow, no escapes
    # The second frame has a throughput (a rate needs two snapshots).
    assert re.search(r"processed \(\d+\.\d jobs/s\)", proc.output())


def test_watch_json_prints_one_object_per_line(site):
    proc = Proc(
        python_module("status", "--admin", site.admin, "--watch", "--json", "--interval", "0.2")
    )
    try:
        proc.wait_output(r"(\{[^\n]*\}\n){2}")
        proc.signal(signal.SIGINT)
        assert proc.popen.wait(15) == 0
    finally:
        proc.stop()
    frames = [json.loads(line) for line in proc.output().splitlines() if line.startswith("{")]
    assert len(frames) >= 2
    assert all(frame["reachable"] for frame in frames)


def test_watch_redraws_in_place_on_a_terminal(site):
    """manage.py emq_status --watch with a pseudo-terminal as stdout."""
    master, slave = pty.openpty()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(ROOT)}
    popen = subprocess.Popen(
        [*_manage(), "emq_status", "--admin", site.admin, "--watch", "--interval", "0.2"],
        stdout=slave,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        env=env,
    )
    os.close(slave)
    seen = bytearray()

    def two_frames() -> bool:
        while select.select([master], [], [], 0)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen.extend(chunk)
        return seen.count(status.CLEAR.encode()) >= 2 and seen.endswith(b"poisoned\r\n")

    try:
        wait_for(two_frames, 30, "two redrawn frames on the terminal")
        popen.send_signal(signal.SIGINT)
        assert popen.wait(15) == 0
    finally:
        if popen.poll() is None:
            popen.kill()
            popen.wait(5)
        os.close(master)
    text = seen.decode(errors="replace")
    for frame in text.split(status.CLEAR)[1:3]:
        assert frame.startswith("router tcp://")
        assert "JOB MANAGER" in frame


def _manage() -> list[str]:
    import sys

    return [sys.executable, str(Path(ROOT) / "manage.py")]


def test_an_unreachable_router_exits_1_with_a_clear_line():
    nowhere = f"tcp://127.0.0.1:{free_port()}"
    done = run_status("--admin", nowhere, "--timeout", "0.3")
    assert done.returncode == 1
    assert f"router unreachable: no answer to STATUS from {nowhere} within 0.3s" in done.stdout

    out = io.StringIO()
    with pytest.raises(CommandError, match="the router did not answer"):
        call_command("emq_status", admin=nowhere, timeout=0.3, stdout=out)
    assert "router unreachable" in out.getvalue()


def test_bad_options_are_refused():
    done = run_status("--interval", "0")
    assert done.returncode == 2
    assert "expected a number of seconds > 0, got '0'" in done.stderr
