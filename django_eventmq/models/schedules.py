"""The schedule table and its run claims (imported by :mod:`django_eventmq.models`).

A :class:`Schedule` row mirrors one schedule, whether it came from a SCHEDULE
message (``schedule()``), the admin or ``@job(schedule=...)`` in code. A
:class:`ScheduleRun` row is written *before* a run is sent; its unique
``(schedule, fire_time)`` is what stops two schedulers from sending the same
run twice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from django_eventmq.protocol import JobBody, parse_headers
from django_eventmq.protocol.payload import encode_json
from django_eventmq.scheduling.identity import schedule_identity
from django_eventmq.scheduling.timing import InvalidSchedule, Timing, first_run, rescheduled_run

#: The timing fields: a change to one of them moves the next run.
TIMING_FIELDS = ("interval", "cron", "timezone")


class Schedule(models.Model):
    """A job that runs every ``interval`` seconds or on ``cron`` in ``timezone``."""

    class Source(models.TextChoices):
        API = "api", "API (schedule())"
        ADMIN = "admin", "admin"
        CODE = "code", "code (@job)"

    name = models.CharField(max_length=200, blank=True, help_text="Optional label for humans.")
    # The job: a callable in a module, or a method of a class ("module:Class").
    path = models.CharField(max_length=255, help_text="Module, e.g. 'shop.jobs'.")
    callable = models.CharField(max_length=255, help_text="Function name, e.g. 'send_report'.")
    args = models.JSONField(default=list, blank=True, help_text="JSON list of arguments.")
    kwargs = models.JSONField(default=dict, blank=True, help_text="JSON object of arguments.")
    class_args = models.JSONField(default=list, blank=True)
    class_kwargs = models.JSONField(default=dict, blank=True)
    queue = models.CharField(max_length=100, default="default")
    headers = models.CharField(
        max_length=255,
        blank=True,
        help_text="Headers of the requests fired, e.g. 'guarantee,timeout:30'.",
    )
    # The timing: exactly one of interval / cron.
    interval = models.PositiveIntegerField(
        null=True, blank=True, help_text="Run every this many seconds."
    )
    cron = models.CharField(
        max_length=100, blank=True, help_text="Cron expression, e.g. '30 2 * * *'."
    )
    timezone = models.CharField(
        max_length=64, default="UTC", help_text="IANA timezone the cron expression is read in."
    )
    nohaste = models.BooleanField(
        default=False, help_text="Wait one period before the first run instead of running now."
    )
    run_count = models.PositiveIntegerField(
        null=True, blank=True, help_text="Stop after this many runs (empty: run for ever)."
    )
    runs_left = models.PositiveIntegerField(null=True, blank=True, editable=False)
    enabled = models.BooleanField(default=True)
    last_run = models.DateTimeField(null=True, blank=True, editable=False)
    next_run = models.DateTimeField(null=True, blank=True, editable=False, db_index=True)
    total_runs = models.PositiveIntegerField(default=0, editable=False)
    last_msgid = models.CharField(max_length=64, blank=True, editable=False)
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.ADMIN)
    # Identity: job body + timing (``key``) and job body alone (``job_key``,
    # the reference's hash, what an UNSCHEDULE without timing matches).
    key = models.CharField(max_length=40, unique=True, editable=False)
    job_key = models.CharField(max_length=40, db_index=True, editable=False)
    #: Bumped on every save; running schedulers reload rows whose revision changed.
    revision = models.PositiveBigIntegerField(default=0, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        app_label = "django_eventmq"
        ordering = ("name", "path", "callable", "id")
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(interval__isnull=False) & models.Q(cron=""))
                | (models.Q(interval__isnull=True) & ~models.Q(cron="")),
                name="emq_schedule_interval_xor_cron",
            )
        ]

    def __str__(self) -> str:
        return self.name or f"{self.path}.{self.callable} ({self.describe_timing()})"

    # -- derived values ---------------------------------------------------
    def timing(self) -> Timing:
        """The timing, checked (raises ``InvalidSchedule``)."""
        return Timing(interval=self.interval, cron=self.cron or None, timezone=self.timezone)

    def job_body(self) -> JobBody:
        return JobBody(
            path=self.path,
            callable=self.callable,
            args=tuple(self.args or ()),
            kwargs=dict(self.kwargs or {}),
            class_args=tuple(self.class_args or ()),
            class_kwargs=dict(self.class_kwargs or {}),
        )

    def describe_timing(self) -> str:
        try:
            return self.timing().describe()
        except InvalidSchedule:
            return "invalid timing"

    def upcoming(self, count: int = 3) -> list[datetime]:
        """The next ``count`` fire times (empty when disabled or finished)."""
        if not self.enabled or self.next_run is None:
            return []
        timing = self.timing()
        first = self.next_run
        anchor = first if timing.interval is not None else None
        return timing.upcoming(first, count, anchor=anchor)

    # -- validation and saving ---------------------------------------------
    def clean(self) -> None:
        errors: dict[str, Any] = {}
        if (self.interval is None) == (not self.cron):
            errors["interval"] = "Give either an interval in seconds or a cron expression."
        else:
            try:
                self.timing()
            except InvalidSchedule as exc:
                field = (
                    "timezone" if "timezone" in str(exc) else ("cron" if self.cron else "interval")
                )
                errors[field] = str(exc)
        try:
            self.job_body()
        except ValueError as exc:
            errors["path"] = str(exc)
        if not isinstance(self.args, list):
            errors["args"] = 'Must be a JSON list, e.g. [1, "a"].'
        if not isinstance(self.kwargs, dict):
            errors["kwargs"] = 'Must be a JSON object, e.g. {"to": "ops"}.'
        try:
            parse_headers(self.headers)
        except ValueError as exc:
            errors["headers"] = str(exc)
        else:
            try:
                encode_json([self.args, self.kwargs])
            except TypeError as exc:
                errors["args"] = str(exc)
        if errors:
            raise ValidationError(errors)
        self.compute_identity()
        clash = Schedule.objects.filter(key=self.key).exclude(pk=self.pk)
        if clash.exists():
            raise ValidationError(
                "This job already has a schedule with these arguments and this timing."
            )

    def compute_identity(self) -> None:
        body = self.job_body()
        self.key = schedule_identity(body, self.timing())
        from django_eventmq.scheduling.identity import job_identity

        self.job_key = job_identity(body)

    def save(self, *args: Any, now: datetime | None = None, **kwargs: Any) -> None:
        """Save, keeping identity, next run and revision consistent with the fields.

        ``now`` (default: the current time) is when the timing starts.
        """
        self.compute_identity()
        now = now or timezone.now()
        timing = self.timing()
        previous = None
        if self.pk is not None:
            previous = (
                Schedule.objects.filter(pk=self.pk)
                .values(*TIMING_FIELDS, "enabled", "run_count")
                .first()
            )
        if previous is None:
            if self.runs_left is None:
                self.runs_left = self.run_count
            if self.next_run is None:
                self.next_run = first_run(timing, now, nohaste=self.nohaste)
        else:
            if any(previous[f] != getattr(self, f) for f in TIMING_FIELDS):
                self.next_run = rescheduled_run(
                    timing, now, last_run=self.last_run, nohaste=self.nohaste
                )
            if previous["run_count"] != self.run_count:
                done = (
                    0
                    if previous["run_count"] is None
                    else previous["run_count"] - (self.runs_left or 0)
                )
                self.runs_left = None if self.run_count is None else max(0, self.run_count - done)
            if self.enabled and not previous["enabled"] and self.next_run is not None:
                # Re-enabled: no storm of runs for the time it was off.
                self.next_run = max(self.next_run, now)
            if self.enabled and self.next_run is None and self.runs_left != 0:
                self.next_run = rescheduled_run(
                    timing, now, last_run=self.last_run, nohaste=self.nohaste
                )
        self.revision = (self.revision or 0) + 1
        update_fields = kwargs.get("update_fields")
        if update_fields is not None:
            kwargs["update_fields"] = {*update_fields, "revision", "next_run", "runs_left"}
        super().save(*args, **kwargs)


class ScheduleRun(models.Model):
    """One run of a schedule, claimed before it is sent: at most one row per fire time."""

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="runs")
    fire_time = models.DateTimeField()
    msgid = models.CharField(max_length=64, db_index=True)
    claimed_by = models.CharField(max_length=100, blank=True)
    claimed_at = models.DateTimeField(auto_now_add=True)
    result = models.TextField(blank=True, help_text="The job's REPLY, if the router sent one.")

    class Meta:
        app_label = "django_eventmq"
        ordering = ("-fire_time",)
        constraints = [
            models.UniqueConstraint(fields=("schedule", "fire_time"), name="emq_schedulerun_once")
        ]

    def __str__(self) -> str:
        return f"{self.schedule_id} at {self.fire_time.isoformat()}"
