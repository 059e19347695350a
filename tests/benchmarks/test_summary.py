"""The benchmarks' pure summary helpers: medians over runs, targets judged."""

from __future__ import annotations

from benchmarks._summary import Target, median_of
from benchmarks.throughput import huey_ratio, targets


def test_median_of_runs_is_shaped_like_one_run():
    runs = [
        {"ours": {"e2e": 3.0, "cpu": {"router": 10.0}, "ok": True, "prefetch": None}, "r": 1},
        {"ours": {"e2e": 1.0, "cpu": {"router": 30.0}, "ok": False, "prefetch": None}, "r": 2},
        {"ours": {"e2e": 2.0, "cpu": {"router": 20.0}, "ok": True, "prefetch": None}, "r": 3},
    ]
    assert median_of(runs) == {
        "ours": {"e2e": 2.0, "cpu": {"router": 20.0}, "ok": False, "prefetch": None},
        "r": 2,
    }


def test_median_of_an_even_count_and_keys_only_some_runs_have():
    runs = [{"a": 1, "only_first": 5}, {"a": 4}]
    assert median_of(runs) == {"a": 2.5}
    assert median_of([]) is None


def test_median_of_none_among_numbers_keeps_the_first():
    assert median_of([None, 2.0]) is None


def test_target_at_least_and_at_most():
    assert Target("e2e", 20_000, 20_000, unit="/s").verdict == "MET"
    assert Target("e2e", 19_999, 20_000, unit="/s").verdict == "NOT MET"
    assert Target("p50", 0.5, 0.5, at_most=True, unit="ms").verdict == "MET"
    assert Target("p50", 0.51, 0.5, at_most=True, unit="ms").verdict == "NOT MET"
    assert Target("ratio", None, 3.5, unit="x").verdict == "NOT MEASURED"


def test_target_line_names_the_figure_and_the_goal():
    line = Target("end to end", 21_234.4, 20_000, unit="/s").line()
    assert line == "end to end: MET (21,234/s; target >= 20,000/s)"
    line = Target("p99", 2.5, 2.0, at_most=True, unit="ms").line()
    assert line == "p99: NOT MET (2.500 ms; target <= 2.000 ms)"
    assert Target("over huey", None, 3.5, unit="x").line() == (
        "over huey: NOT MEASURED (-; target >= 3.50x)"
    )


def test_throughput_targets_judged_on_a_summary():
    summary = {
        "ours": {"end_to_end_per_second": 25_000.0},
        "huey": {"end_to_end_per_second": 5_000.0},
        "enqueue_router_only": {"stored_per_second": 59_000.0},
    }
    summary["ours_over_huey"] = huey_ratio(summary)
    assert summary["ours_over_huey"] == 5.0
    assert [t.verdict for t in targets(summary)] == ["MET", "MET", "NOT MET"]
    assert huey_ratio({"ours": {"end_to_end_per_second": 1.0}}) is None
    assert [t.verdict for t in targets({})] == ["NOT MEASURED"] * 3
