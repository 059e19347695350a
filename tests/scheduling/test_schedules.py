"""The pure next-run maths: intervals, cron in a timezone across DST, catch-up, run counts."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from django_eventmq.scheduling.timing import (
    CATCHUP_ALL,
    CATCHUP_ONCE,
    CATCHUP_SKIP,
    MAX_BATCH,
    InvalidSchedule,
    Timing,
    crontab,
    every,
    first_run,
    plan_due,
    rescheduled_run,
)

BERLIN = ZoneInfo("Europe/Berlin")
T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


def berlin(*args: int, fold: int = 0) -> datetime:
    return datetime(*args, tzinfo=BERLIN, fold=fold).astimezone(UTC)


def fires_between(timing: Timing, start: datetime, end: datetime) -> list[datetime]:
    """Every fire time in (start, end], stepping like the scheduler does."""
    times, current = [], start
    while True:
        current = timing.next_after(current)
        if current > end:
            return times
        times.append(current)


# -- interval ------------------------------------------------------------------


def test_interval_runs_on_a_grid_from_its_anchor() -> None:
    timing = Timing(interval=60)
    assert timing.next_after(T0 + timedelta(seconds=61), anchor=T0) == T0 + timedelta(seconds=120)
    assert timing.next_after(T0) == T0 + timedelta(seconds=60)
    assert timing.describe() == "every minute"
    assert Timing(interval=7200).describe() == "every 2 hours"
    assert Timing(interval=90).describe() == "every 90 seconds"


def test_nohaste_waits_one_period_and_haste_runs_now() -> None:
    timing = Timing(interval=300)
    assert first_run(timing, T0, nohaste=False) == T0
    assert first_run(timing, T0, nohaste=True) == T0 + timedelta(seconds=300)
    cron = Timing(cron="0 9 * * *")
    assert first_run(cron, T0, nohaste=True) == datetime(2025, 1, 2, 9, tzinfo=UTC)


def test_shortening_an_interval_counts_from_the_last_run() -> None:
    timing = Timing(interval=10)
    last = T0 - timedelta(hours=1)
    assert rescheduled_run(timing, T0, last_run=last, nohaste=True) == T0
    assert rescheduled_run(timing, T0, last_run=T0 - timedelta(seconds=4), nohaste=True) == (
        T0 + timedelta(seconds=6)
    )
    assert rescheduled_run(timing, T0, last_run=None, nohaste=False) == T0


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({}, "either an interval"),
        ({"interval": 5, "cron": "* * * * *"}, "either an interval"),
        ({"interval": 0}, "whole number of seconds > 0"),
        ({"interval": 1.5}, "whole number of seconds > 0"),
        ({"cron": "61 * * * *"}, "not a cron expression"),
        ({"cron": "0 0 30 2 *"}, "never fires"),
        ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, "unknown timezone"),
    ],
)
def test_bad_timing_says_what_is_wrong(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(InvalidSchedule, match=fragment):
        Timing(**kwargs)  # type: ignore[arg-type]


# -- cron and DST --------------------------------------------------------------


def test_daily_0230_berlin_fires_once_on_the_spring_forward_day() -> None:
    timing = Timing(cron="30 2 * * *", timezone="Europe/Berlin")
    fires = fires_between(timing, berlin(2025, 3, 29, 12), berlin(2025, 3, 31, 12))
    # 02:30 does not exist on 30 March: it runs when the clock jumps past it.
    assert fires == [berlin(2025, 3, 30, 3, 30), berlin(2025, 3, 31, 2, 30)]
    assert [f.astimezone(BERLIN).date().day for f in fires] == [30, 31]


def test_daily_0230_berlin_fires_once_on_the_fall_back_day() -> None:
    timing = Timing(cron="30 2 * * *", timezone="Europe/Berlin")
    fires = fires_between(timing, berlin(2025, 10, 25, 12), berlin(2025, 10, 27, 12))
    # 02:30 happens twice on 26 October: only the first one fires.
    assert fires == [berlin(2025, 10, 26, 2, 30, fold=0), berlin(2025, 10, 27, 2, 30)]
    assert fires[0] == datetime(2025, 10, 26, 0, 30, tzinfo=UTC)


def test_hourly_job_runs_every_real_hour_across_both_transitions() -> None:
    timing = Timing(cron="30 * * * *", timezone="Europe/Berlin")
    for day in (datetime(2025, 3, 29, 20, tzinfo=UTC), datetime(2025, 10, 25, 20, tzinfo=UTC)):
        fires = fires_between(timing, day, day + timedelta(hours=12))
        gaps = {b - a for a, b in itertools.pairwise(fires)}
        assert gaps == {timedelta(hours=1)}
        assert len(fires) == 12


def test_every_15_minutes_through_the_gap_never_goes_backwards() -> None:
    timing = Timing(cron="*/15 * * * *", timezone="Europe/Berlin")
    fires = fires_between(timing, berlin(2025, 3, 30, 1, 0), berlin(2025, 3, 30, 4, 0))
    assert fires == sorted(set(fires))
    assert {b - a for a, b in itertools.pairwise(fires)} == {timedelta(minutes=15)}


def test_cron_in_utc_and_upcoming_preview() -> None:
    timing = Timing(cron="0 9 * * 1-5")
    monday = datetime(2025, 1, 6, 9, tzinfo=UTC)
    assert timing.upcoming(datetime(2025, 1, 3, 10, tzinfo=UTC), 2) == [
        monday,
        monday + timedelta(days=1),
    ]
    assert timing.describe() == "cron 0 9 * * 1-5 (UTC)"


# -- what is due ---------------------------------------------------------------


def test_one_run_due_on_time() -> None:
    plan = plan_due(Timing(interval=60), T0, T0 + timedelta(seconds=1))
    assert plan.fire_times == (T0,)
    assert plan.next_run == T0 + timedelta(seconds=60)


def test_nothing_due_before_next_run() -> None:
    plan = plan_due(Timing(interval=60), T0, T0 - timedelta(seconds=1))
    assert plan.fire_times == ()
    assert plan.next_run == T0


@pytest.mark.parametrize(
    ("policy", "expected"),
    [(CATCHUP_ONCE, 1), (CATCHUP_SKIP, 0), (CATCHUP_ALL, 11)],
)
def test_catch_up_after_downtime(policy: str, expected: int) -> None:
    # Down for 10.5 minutes: 11 runs of a 1-minute schedule fell due.
    now = T0 + timedelta(minutes=10, seconds=30)
    plan = plan_due(Timing(interval=60), T0, now, policy=policy, grace=5)
    assert len(plan.fire_times) == expected
    assert plan.next_run == T0 + timedelta(minutes=11)  # back on the grid
    if policy == CATCHUP_ONCE:
        assert plan.fire_times == (T0 + timedelta(minutes=10),)


def test_skip_still_fires_a_run_that_is_not_late() -> None:
    plan = plan_due(Timing(interval=60), T0, T0 + timedelta(seconds=2), policy=CATCHUP_SKIP)
    assert plan.fire_times == (T0,)


def test_catch_up_once_for_cron_fires_the_latest_missed_time() -> None:
    timing = Timing(cron="0 * * * *")
    plan = plan_due(timing, T0, T0 + timedelta(hours=5, minutes=10), policy=CATCHUP_ONCE)
    assert plan.fire_times == (T0 + timedelta(hours=5),)
    assert plan.next_run == T0 + timedelta(hours=6)


def test_catch_up_all_is_batched() -> None:
    timing = Timing(interval=1)
    plan = plan_due(timing, T0, T0 + timedelta(hours=1), policy=CATCHUP_ALL)
    assert len(plan.fire_times) == MAX_BATCH
    assert plan.next_run == T0 + timedelta(seconds=MAX_BATCH)


def test_run_count_limits_runs_and_finishes() -> None:
    timing = Timing(interval=60)
    plan = plan_due(timing, T0, T0, runs_left=2)
    assert (len(plan.fire_times), plan.runs_left, plan.finished) == (1, 1, False)
    plan = plan_due(timing, plan.next_run, plan.next_run, runs_left=1)  # type: ignore[arg-type]
    assert (len(plan.fire_times), plan.runs_left, plan.finished) == (1, 0, True)
    plan = plan_due(timing, T0, T0 + timedelta(minutes=5), policy=CATCHUP_ALL, runs_left=3)
    assert len(plan.fire_times) == 3
    assert plan.finished
    assert plan_due(timing, T0, T0, runs_left=0).fire_times == ()


def test_unknown_policy_and_naive_time_are_refused() -> None:
    with pytest.raises(InvalidSchedule, match="catch-up policy"):
        plan_due(Timing(interval=1), T0, T0, policy="sometimes")
    with pytest.raises(ValueError, match="aware"):
        plan_due(Timing(interval=1), T0, datetime(2025, 1, 1))


def test_declarations() -> None:
    assert every(60, args=[1]).timing == Timing(interval=60)
    assert every(60).nohaste is False
    declared = crontab("30 2 * * *", timezone="Europe/Berlin", kwargs={"b": 2, "a": 1})
    assert declared.nohaste is True
    assert declared.kwargs == (("a", 1), ("b", 2))
    with pytest.raises(InvalidSchedule, match="run_count"):
        every(5, run_count=0)
