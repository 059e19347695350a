"""Next-run maths for schedules: interval and cron timings, DST, catch-up, run counts.

Pure: no Django, no sockets, no clock reads. Every function takes ``now`` (or
the instant to start from) as an aware :class:`~datetime.datetime`; results are
aware datetimes in UTC.

Cron expressions are read on the wall clock of the schedule's own timezone:

* a wall time that does not exist (the spring-forward gap) fires once, at the
  moment the clock jumps past it (02:30 in Europe/Berlin fires at 03:30 CEST);
* a wall time that happens twice (fall-back) fires once, at its first
  occurrence, unless the hour field is ``*`` - then the job runs every hour of
  real time, both occurrences included.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from django_eventmq.errors import ConfigurationError

#: Catch-up policies for runs that fell due while no scheduler ran.
CATCHUP_ONCE = "once"  #: fire the latest missed run, once
CATCHUP_SKIP = "skip"  #: drop missed runs; wait for the next one
CATCHUP_ALL = "all"  #: fire every missed run, oldest first
CATCHUP_POLICIES = (CATCHUP_ONCE, CATCHUP_SKIP, CATCHUP_ALL)

#: Most runs :func:`plan_due` returns at once under ``all``; the rest follow
#: on the next call, so a long outage cannot stall the scheduler.
MAX_BATCH = 500

# DST transitions move the clock by at most a few hours (2 h historically);
# around a candidate we look this far for one.
_DST_WINDOW = timedelta(hours=3)


class InvalidSchedule(ConfigurationError):
    """A timing that cannot work: says which part and why."""


def get_zone(name: str) -> ZoneInfo:
    """The IANA timezone ``name`` or :class:`InvalidSchedule`."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidSchedule(
            f"unknown timezone {name!r}; use an IANA name such as 'Europe/Berlin' or 'UTC'"
        ) from None


def check_cron(expr: str) -> None:
    """Raise :class:`InvalidSchedule` unless ``expr`` is a cron expression that ever fires."""
    if not isinstance(expr, str) or not expr.strip():
        raise InvalidSchedule("cron expression is empty")
    if not croniter.is_valid(expr):
        raise InvalidSchedule(
            f"{expr!r} is not a cron expression; expected 5 fields "
            "'minute hour day-of-month month day-of-week', e.g. '30 2 * * *'"
        )
    try:
        croniter(expr, datetime(2000, 1, 1)).get_next(datetime)
    except (CroniterBadDateError, CroniterBadCronError):
        raise InvalidSchedule(f"cron expression {expr!r} never fires") from None


@dataclass(frozen=True, slots=True)
class Timing:
    """When a schedule fires: every ``interval`` seconds, or on ``cron`` in ``timezone``."""

    interval: int | None = None
    cron: str | None = None
    timezone: str = "UTC"
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)
    _any_hour: bool = field(init=False, repr=False, compare=False, default=False)

    def __post_init__(self) -> None:
        if (self.interval is None) == (self.cron is None):
            raise InvalidSchedule("give either an interval in seconds or a cron expression")
        if self.interval is not None and (type(self.interval) is not int or self.interval <= 0):
            raise InvalidSchedule(
                f"interval must be a whole number of seconds > 0, got {self.interval!r}"
            )
        object.__setattr__(self, "_zone", get_zone(self.timezone or "UTC"))
        if self.cron is not None:
            check_cron(self.cron)
            hours = croniter(self.cron).expanded[1]
            object.__setattr__(self, "_any_hour", hours == ["*"])

    @property
    def zone(self) -> tzinfo:
        return self._zone

    def identity(self) -> dict[str, object]:
        """The timing part of a schedule's identity."""
        if self.interval is not None:
            return {"interval": self.interval, "cron": None, "timezone": None}
        return {"interval": None, "cron": self.cron, "timezone": self.timezone}

    # -- stepping ---------------------------------------------------------
    def next_after(self, after: datetime, anchor: datetime | None = None) -> datetime:
        """The first fire time strictly after ``after``.

        Interval timings fire on the grid ``anchor + k * interval`` (``anchor``
        defaults to ``after``, i.e. one interval later).
        """
        after = _utc(after)
        if self.interval is not None:
            step = timedelta(seconds=self.interval)
            base = after if anchor is None else _utc(anchor)
            if base > after:
                return base
            return base + step * ((after - base) // step + 1)
        assert self.cron is not None
        return _cron_next(self.cron, self._zone, after, self._any_hour)

    def latest_at_or_before(self, at: datetime, anchor: datetime) -> datetime:
        """The last fire time ``<= at`` on or after ``anchor`` (itself a fire time)."""
        at, anchor = _utc(at), _utc(anchor)
        if at <= anchor:
            return anchor
        if self.interval is not None:
            step = timedelta(seconds=self.interval)
            return anchor + step * ((at - anchor) // step)
        assert self.cron is not None
        latest = _cron_prev(self.cron, self._zone, at, self._any_hour)
        return max(latest, anchor) if latest is not None else anchor

    def upcoming(
        self, start: datetime, count: int, anchor: datetime | None = None
    ) -> list[datetime]:
        """The next ``count`` fire times from ``start`` (inclusive if ``start`` is one)."""
        times: list[datetime] = []
        current = _utc(start) - timedelta(microseconds=1)
        for _ in range(count):
            current = self.next_after(current, anchor)
            anchor = current if anchor is not None else None
            times.append(current)
        return times

    def describe(self) -> str:
        """The timing in words, e.g. 'every 5 minutes' or 'cron 30 2 * * * (Europe/Berlin)'."""
        if self.interval is not None:
            return "every " + describe_seconds(self.interval)
        return f"cron {self.cron} ({self.timezone or 'UTC'})"


def describe_seconds(seconds: int) -> str:
    """'90 seconds' -> '90 seconds', 3600 -> 'hour', 7200 -> '2 hours'."""
    for size, unit in ((86400, "day"), (3600, "hour"), (60, "minute")):
        if seconds % size == 0:
            count = seconds // size
            return unit if count == 1 else f"{count} {unit}s"
    return "second" if seconds == 1 else f"{seconds} seconds"


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"expected an aware datetime, got naive {value!r}")
    return value.astimezone(UTC)


def _wall(instant: datetime, zone: tzinfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None)


def _instants(naive: datetime, zone: tzinfo, any_hour: bool) -> list[datetime]:
    """The real instants at which the wall time ``naive`` fires (see module docstring)."""
    first = naive.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if _wall(first, zone) != naive:
        # In the gap: fold=0 reads it with the offset before the jump, which
        # lands just after the jump - when the job "should" have run.
        return [first]
    second = naive.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if second != first and any_hour:
        return [first, second]
    return [first]


def _steady(zone: tzinfo, instant: datetime) -> bool:
    """True when the zone's offset does not change within the DST window of ``instant``."""
    before = (instant - _DST_WINDOW).astimezone(zone).utcoffset()
    after = (instant + _DST_WINDOW).astimezone(zone).utcoffset()
    return before == after


def _cron_next(expr: str, zone: tzinfo, after: datetime, any_hour: bool) -> datetime:
    it = croniter(expr, _wall(after, zone))
    naive: datetime = it.get_next(datetime)
    candidate = naive.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if candidate > after and _steady(zone, after) and _steady(zone, candidate):
        return candidate  # the common case: no transition anywhere near
    # Near a transition wall times and instants do not move together: look at
    # every wall time from a window before, and take the earliest instant.
    it = croniter(expr, _wall(after, zone) - _DST_WINDOW)
    best: datetime | None = None
    while True:
        naive = it.get_next(datetime)
        if best is not None and naive > _wall(best, zone) + _DST_WINDOW:
            return best
        for instant in _instants(naive, zone, any_hour):
            if instant > after and (best is None or instant < best):
                best = instant


def _cron_prev(expr: str, zone: tzinfo, at: datetime, any_hour: bool) -> datetime | None:
    it = croniter(expr, _wall(at, zone) + _DST_WINDOW + timedelta(microseconds=1))
    best: datetime | None = None
    for _ in range(100_000):
        try:
            naive = it.get_prev(datetime)
        except CroniterBadDateError:
            return best
        if best is not None and naive < _wall(best, zone) - _DST_WINDOW:
            return best
        for instant in _instants(naive, zone, any_hour):
            if instant <= at and (best is None or instant > best):
                best = instant
    return best


# -- the first run and what is due ---------------------------------------


def first_run(timing: Timing, now: datetime, *, nohaste: bool) -> datetime:
    """When a new schedule first fires: now, or (``nohaste``) one period later."""
    now = _utc(now)
    if not nohaste:
        return now
    return timing.next_after(now)


def rescheduled_run(
    timing: Timing, now: datetime, *, last_run: datetime | None, nohaste: bool
) -> datetime:
    """The next run after the timing of an existing schedule changed.

    An interval counts from the last run (so shortening it takes effect at
    once); a cron timing simply fires at its next time.
    """
    now = _utc(now)
    if last_run is None:
        return first_run(timing, now, nohaste=nohaste)
    if timing.interval is not None:
        return max(_utc(last_run) + timedelta(seconds=timing.interval), now)
    return timing.next_after(now)


@dataclass(frozen=True, slots=True)
class DuePlan:
    """What to do now: fire ``fire_times`` (oldest first), then wait for ``next_run``.

    ``next_run`` is None once ``runs_left`` reached 0. ``missed`` counts
    runs that fell due and will never fire (catch-up policy, run count).
    """

    fire_times: tuple[datetime, ...]
    next_run: datetime | None
    runs_left: int | None
    missed: int = 0

    @property
    def finished(self) -> bool:
        return self.next_run is None


def plan_due(
    timing: Timing,
    next_run: datetime,
    now: datetime,
    *,
    policy: str = CATCHUP_ONCE,
    grace: float = 60.0,
    runs_left: int | None = None,
) -> DuePlan:
    """The runs due at ``now`` for a schedule whose next run is ``next_run``.

    A run is *missed* when it is more than ``grace`` seconds late (no
    scheduler was running). ``policy`` says what happens to missed runs:
    ``once`` fires the latest due run a single time, ``skip`` fires only a
    run that is not late, ``all`` fires every due run (at most
    :data:`MAX_BATCH` per call).
    """
    if policy not in CATCHUP_POLICIES:
        raise InvalidSchedule(f"catch-up policy must be one of {CATCHUP_POLICIES}, got {policy!r}")
    next_run, now = _utc(next_run), _utc(now)
    if runs_left is not None and runs_left <= 0:
        return DuePlan((), None, 0)
    if next_run > now:
        return DuePlan((), next_run, runs_left)
    following = timing.next_after(next_run, anchor=next_run)
    fire: list[datetime]
    missed = 0
    if following > now:  # the usual case: exactly one run due
        late = (now - next_run).total_seconds() > grace
        fire = [] if (late and policy == CATCHUP_SKIP) else [next_run]
        missed = 1 - len(fire)
    elif policy == CATCHUP_ALL:
        fire = [next_run]
        while following <= now and len(fire) < MAX_BATCH:
            fire.append(following)
            following = timing.next_after(following, anchor=next_run)
    else:
        latest = timing.latest_at_or_before(now, next_run)
        late = (now - latest).total_seconds() > grace
        fire = [] if (late and policy == CATCHUP_SKIP) else [latest]
        following = timing.next_after(latest, anchor=next_run)
        if following <= now:  # cannot happen for a true latest; be safe
            following = timing.next_after(now, anchor=next_run)
        missed = 2 - len(fire)  # at least: the exact count is not worth computing
    if runs_left is not None:
        fire = fire[:runs_left]
        runs_left -= len(fire)
        if runs_left == 0:
            return DuePlan(tuple(fire), None, 0, missed)
    return DuePlan(tuple(fire), following, runs_left, missed)


# -- schedules declared in code (``@job(schedule=every(60))``) ------------


@dataclass(frozen=True, slots=True)
class Periodic:
    """A schedule declared in code; synced into the schedule table at scheduler start-up."""

    timing: Timing
    args: tuple[object, ...] = ()
    kwargs: tuple[tuple[str, object], ...] = ()
    nohaste: bool = False
    run_count: int | None = None

    def __post_init__(self) -> None:
        if self.run_count is not None and (type(self.run_count) is not int or self.run_count < 1):
            raise InvalidSchedule(f"run_count must be a whole number >= 1, got {self.run_count!r}")


def every(
    seconds: int,
    *,
    args: tuple[object, ...] | list[object] = (),
    kwargs: dict[str, object] | None = None,
    nohaste: bool = False,
    run_count: int | None = None,
) -> Periodic:
    """Run every ``seconds``; the first run is right away unless ``nohaste``."""
    return Periodic(
        Timing(interval=seconds),
        tuple(args),
        tuple(sorted((kwargs or {}).items())),
        nohaste,
        run_count,
    )


def crontab(
    expr: str,
    *,
    timezone: str = "UTC",
    args: tuple[object, ...] | list[object] = (),
    kwargs: dict[str, object] | None = None,
    nohaste: bool = True,
    run_count: int | None = None,
) -> Periodic:
    """Run at the times of the cron ``expr`` on ``timezone``'s wall clock.

    ``nohaste`` defaults to True here: a cron job waits for its first time
    (pass ``nohaste=False`` to also run it once as soon as it is created).
    """
    return Periodic(
        Timing(cron=expr, timezone=timezone),
        tuple(args),
        tuple(sorted((kwargs or {}).items())),
        nohaste,
        run_count,
    )
