"""Issue 32's report on made-up figures: verdicts, ratios, skip lines; and the
"done" counting the durable benchmark uses (real UDP on loopback, no processes)."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks import _durable_report as report
from benchmarks import durable_peers
from benchmarks._udp import DoneCounter, Probe, send_done, send_stamp
from benchmarks.durable_peers import drive, floor_rate, missing_peers


def _rates(one: float, threads: float) -> dict[str, Any]:
    return {"one": {"per_second": one}, "threads": {"per_second": threads}}


def _start(p50: float, p99: float, **extra: float) -> dict[str, Any]:
    return {"start": {"p50": p50, "p99": p99, "max": p99}, **extra}


def results(**changes: Any) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "jobs": 1000,
        "threads": 8,
        "skipped": {},
        "durable": {
            "ours": _rates(3000, 6000),
            "huey": _rates(1400, 1300),
            "celery": _rates(600, 900),
            "dramatiq": _rates(800, 1100),
            "floor": {
                "one": {"per_second": 4000},
                "threads": {"per_second": 12000},
                "plain": {"per_second": 20000},
            },
        },
        "plain": {
            "ours": {"end_to_end_per_second": 10_000},
            "huey": {"end_to_end_per_second": 2_000},
        },
        "latency": {
            "huey": {
                "low_load": _start(1.0, 2.0),
                "peak": {"jobs_per_second": 3000},
                "half_peak": _start(1.5, 6.0, jobs_per_second=1500),
            },
            "ours": {
                "low_load": _start(0.9, 3.0),
                "half_peak": _start(1.5, 5.0, jobs_per_second=1490),
                "guaranteed_low_load": _start(1.2, 4.0),
            },
            "floor": {"low_load": _start(0.45, 1.0)},
        },
    }
    figures.update(changes)
    return figures


def verdicts(figures: dict[str, Any]) -> list[tuple[float | None, str]]:
    return [(t.value, t.verdict) for t in report.targets(figures)]


def test_each_target_is_judged_on_ratios_in_the_same_run():
    found = verdicts(results())
    assert found == [
        (pytest.approx(3000 / 1400), "MET"),  # 2.14x the best one-at-a-time peer (Huey)
        (pytest.approx(6000 / 1300), "NOT MET"),  # 4.6x the best with 8 threads (Huey)
        (pytest.approx(0.9), "MET"),  # low-load p50 0.9 / 1.0
        (pytest.approx(1.5), "NOT MET"),  # low-load p99 3.0 / 2.0
        (pytest.approx(1.0), "MET"),  # half peak p50: equal is met
        (pytest.approx(5 / 6), "MET"),
        (pytest.approx(5.0), "MET"),  # plain end to end 10,000 / 2,000
    ]


def test_the_best_peer_is_the_fastest_measured_per_mode_and_named():
    figures = results()
    assert report.best_peer(figures, "one") == ("huey", 1400)
    figures["durable"]["dramatiq"] = _rates(800, 2000)
    assert report.best_peer(figures, "threads") == ("dramatiq", 2000)
    labels = [t.label for t in report.targets(figures)]
    assert "(Huey + Redis)" in labels[0]
    assert "(Dramatiq + RabbitMQ)" in labels[1]
    assert "8 sending threads" in labels[1]


def test_skipped_peers_are_left_out_and_all_skipped_is_not_measured():
    durable = {"ours": _rates(3000, 6000), "celery": _rates(1000, 1000)}
    figures = results(durable=durable, skipped={"huey": "no redis", "dramatiq": "no rabbit"})
    assert report.best_peer(figures, "one") == ("celery", 1000)
    alone = results(durable={"ours": _rates(3000, 6000)}, latency={}, plain={})
    assert [v for _, v in verdicts(alone)] == ["NOT MEASURED"] * 7


def test_latency_targets_without_huey_are_not_measured():
    figures = results()
    del figures["latency"]["huey"]
    assert [v for _, v in verdicts(figures)[2:6]] == ["NOT MEASURED"] * 4


def test_skip_lines_name_the_peer_and_the_reason():
    lines = report.skip_lines({"celery": "nothing answers on 127.0.0.1:5672", "x": "why"})
    assert lines == [
        "Celery 5 + RabbitMQ, confirms, acks_late: skipped, nothing answers on 127.0.0.1:5672",
        "x: skipped, why",
    ]


def test_missing_rabbit_skips_both_rabbit_peers_and_huey_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As where the bench extra is installed (the suite's .venv need not have it).
    monkeypatch.setattr(durable_peers, "_missing_module", lambda *names: None)
    assert missing_peers("no rabbit", None) == {"celery": "no rabbit", "dramatiq": "no rabbit"}
    assert missing_peers(None, "no redis") == {"huey": "no redis"}


def test_a_peer_whose_package_is_missing_is_skipped_saying_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    absent = {"dramatiq"}

    def missing(*names: str) -> str | None:
        gone = [name for name in names if name in absent]
        return f"the {gone[0]!r} package is not installed" if gone else None

    monkeypatch.setattr(durable_peers, "_missing_module", missing)
    assert missing_peers(None, None) == {"dramatiq": "the 'dramatiq' package is not installed"}


def test_ours_over_the_floor():
    rows = dict(report.floor_ratios(results()))
    assert rows == {
        "guaranteed one at a time, jobs/s": pytest.approx(0.75),
        "guaranteed 8 threads, jobs/s": pytest.approx(0.5),
        "plain .delay() end to end, jobs/s": pytest.approx(0.5),
        "low-load start p50, ms": pytest.approx(2.0),
        "low-load start p99, ms": pytest.approx(3.0),
    }
    assert set(dict(report.floor_ratios({})).values()) == {None}


def test_what_the_floor_reaches_against_each_target():
    rows = {label: value for label, value, _goal, _at_most in report.floor_reach(results())}
    # Floor 4,000 one at a time over Huey's 1,400; 12,000 with 8 threads over Huey's 1,300.
    assert rows["guaranteed one at a time: floor / best peer"] == pytest.approx(4000 / 1400)
    assert rows["guaranteed 8 threads: floor / best peer"] == pytest.approx(12000 / 1300)
    assert rows["low-load start p99: floor / Huey + Redis"] == pytest.approx(1.0 / 2.0)
    lines = report.floor_reach_lines(results())
    assert "target >= 2.00x: the floor reaches it" in lines[0]
    slow_floor = results()
    slow_floor["durable"]["floor"]["one"] = {"per_second": 2000}  # 1.43x Huey: under 2x
    slow_floor["latency"]["floor"]["low_load"] = _start(1.2, 1.0)  # p50 above Huey's 1.0
    lines = report.floor_reach_lines(slow_floor)
    assert "1.43x  (target >= 2.00x: above what the hops allow here)" in lines[0]
    assert "(target <= 1.00x: above what the hops allow here)" in lines[2]
    assert all("not measured" in line for line in report.floor_reach_lines({}))


def test_printed_report_has_every_peer_skip_line_and_verdict(capsys):
    figures = results(skipped={"dramatiq": "nothing answers on 127.0.0.1:5672"})
    del figures["durable"]["dramatiq"]
    report.print_report(figures)
    out = capsys.readouterr().out
    assert "Dramatiq + RabbitMQ, confirm_delivery: skipped, nothing answers" in out
    assert "ours over Huey + Redis" in out and "2.14x" in out
    assert "ours over Dramatiq" not in out
    for label in report.PEERS.values():
        assert label in out
    assert out.count("NOT MET") == 2
    assert out.count(": MET") == 5


def test_done_counter_counts_datagrams_from_threaded_senders():
    counter = DoneCounter()
    try:
        result = drive(send_done, counter, 50, 8)
        assert result["completed"] == 50 and result["threads"] == 8
        result = drive(send_done, counter, 7, 1)
        assert result["completed"] == 7 and counter.count == 57
    finally:
        counter.close()


def test_done_counter_reports_a_short_count_on_timeout():
    counter = DoneCounter()
    try:
        counter.expect(3)
        send_done(counter.port)
        _, count = counter.wait(0.05)
        assert count == 1
    finally:
        counter.close()


def test_probe_returns_each_stamp_by_sequence_even_out_of_order():
    probe = Probe()
    try:
        first, second = probe.next_seq(), probe.next_seq()
        send_stamp(probe.port, second)
        send_stamp(probe.port, first)
        assert probe.wait(first, 5.0) is not None
        assert probe.wait(second, 0.0) is not None  # kept when it came early
        assert probe.wait(probe.next_seq(), 0.01) is None
    finally:
        probe.close()


def test_floor_rate_counts_every_job_of_every_sender():
    from benchmarks._floor import Floor

    floor = Floor(sync=True)
    try:
        assert floor_rate(floor, 20, 1)["jobs"] == 20
        assert floor_rate(floor, 30, 4)["threads"] == 4
        assert floor_rate(floor, 30, 1, wait_ack=False)["per_second"] > 0
    finally:
        floor.stop()


def test_run_line_gives_each_ratio_in_target_order_and_marks_misses():
    line = report.run_line(2, 5, results())
    assert line.startswith("run 2/5: 2.14x 4.62x! 0.90x 1.50x! 1.00x 0.83x 5.00x")
    assert report.run_line(1, 1, {}).startswith("run 1/1: -? -? -? -? -? -? -?")


def test_medians_of_runs_keep_the_report_shape():
    from benchmarks._summary import median_of

    slower = results()
    slower["durable"]["ours"] = _rates(1000, 2000)
    fast = results()
    merged = median_of([slower, fast, results()])
    assert [t.verdict for t in report.targets(merged)] == [
        t.verdict for t in report.targets(results())
    ]


def test_throughput_durable_hands_its_arguments_to_durable_peers(capsys):
    from benchmarks import throughput

    with pytest.raises(SystemExit):
        throughput.main(["--durable", "--runs", "0"])
    assert "--runs must be at least 1" in capsys.readouterr().err


def test_a_vhost_that_cannot_be_made_skips_both_rabbit_peers_with_the_reason(capsys):
    from benchmarks._rabbit import NoVhost
    from benchmarks.durable_peers import make_vhost

    def refuse() -> Any:
        raise NoVhost("rabbitmqctl add_vhost: no cookie; HTTP API PUT: refused")

    skipped = {"huey": "no redis"}
    assert make_vhost(skipped, refuse) is None
    assert skipped["celery"] == skipped["dramatiq"]
    assert "no cookie" in skipped["celery"] and skipped["huey"] == "no redis"
    out = capsys.readouterr().out
    assert "Celery 5 + RabbitMQ, confirms, acks_late: skipped, cannot make a vhost" in out
    assert "Dramatiq + RabbitMQ, confirm_delivery: skipped, cannot make a vhost" in out


class _Api:
    """A stand-in for the management plugin's HTTP API: records each request."""

    def __init__(self) -> None:
        import http.server
        import threading

        seen = self.seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                seen.append((self.command, self.path, body, self.headers["Authorization"]))
                self.send_response(201 if self.command == "PUT" else 204)
                self.end_headers()

            do_PUT = do_DELETE = _any

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/api"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_the_vhost_is_made_and_removed_over_http_when_rabbitmqctl_is_missing(monkeypatch):
    import base64

    from benchmarks import _rabbit

    monkeypatch.setattr(_rabbit.shutil, "which", lambda name: None)
    api = _Api()
    try:
        vhost = _rabbit.Vhost(api.url)
        assert vhost.by_http and vhost.url.endswith(f"/{vhost.name}")
        vhost.remove()
    finally:
        api.close()
    auth = "Basic " + base64.b64encode(b"guest:guest").decode()
    assert [(m, p, a) for m, p, _b, a in api.seen] == [
        ("PUT", f"/api/vhosts/{vhost.name}", auth),
        ("PUT", f"/api/permissions/{vhost.name}/guest", auth),
        ("DELETE", f"/api/vhosts/{vhost.name}", auth),
    ]
    assert b'"configure": ".*"' in api.seen[1][2]


def test_no_rabbitmqctl_and_no_api_is_one_reason(monkeypatch):
    from benchmarks import _rabbit

    monkeypatch.setattr(_rabbit.shutil, "which", lambda name: None)
    with pytest.raises(_rabbit.NoVhost, match="rabbitmqctl is not on PATH; HTTP API PUT"):
        _rabbit.Vhost("http://127.0.0.1:1/api")
