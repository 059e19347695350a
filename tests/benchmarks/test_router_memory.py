"""benchmarks/router_memory.py's summary of the RSS samples, on made-up samples."""

from __future__ import annotations

import pytest

from benchmarks.router_memory import Sample, memory_summary, rss_once_sent


def samples() -> list[Sample]:
    return [
        Sample(0.0, 0, 30.0, 20.0),
        Sample(0.2, 60_000, 38.0, 21.0),
        Sample(0.4, 100_000, 39.0, 25.0),
        Sample(0.6, 150_000, 41.5, 22.0),
        Sample(0.8, 200_000, 39.5, 22.0),  # all sent
        Sample(1.0, 200_000, 40.0, 22.0),  # all done
    ]


def test_the_summary_reads_the_peak_the_mark_all_sent_and_the_end():
    memory = memory_summary(samples(), mark=100_000, jobs=200_000)
    assert memory.peak == 41.5
    assert memory.at_mark == 39.0
    assert memory.all_sent == 39.5  # the first sample once the last job was sent
    assert memory.at_end == 40.0
    assert memory.jobmanager_peak == 25.0
    assert memory.growth == pytest.approx(1.0)


def test_a_mark_between_samples_takes_the_first_sample_past_it():
    assert rss_once_sent(samples(), 80_000) == 39.0
    assert rss_once_sent(samples(), 1) == 38.0


def test_a_count_never_reached_has_no_figure_and_no_growth():
    memory = memory_summary(samples()[:3], mark=150_000, jobs=200_000)
    assert memory.at_mark is None
    assert memory.all_sent is None
    assert memory.growth is None
    assert memory.at_end == 39.0


def test_no_job_manager_reads_zero_for_it():
    only_router = [Sample(0.0, 0, 30.0), Sample(0.2, 10, 31.0)]
    assert memory_summary(only_router, mark=10, jobs=10).jobmanager_peak == 0.0


def test_no_samples_is_an_error():
    with pytest.raises(ValueError, match="no samples"):
        memory_summary([], mark=1, jobs=1)
