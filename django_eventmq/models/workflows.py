"""Workflows (``chain``, ``group``, ``chord``): one row each, one row per finished member.

:class:`Workflow` is written when the workflow is sent (its plan of stages,
``running``) and changed as it goes: the stage reached, ``succeeded`` with
the final result, ``failed`` with the member that failed, ``cancelled``.
:class:`WorkflowStep` is a member that succeeded, written by the member
itself (in its worker) before the next stage is sent: a stage is complete
when it has a row per member. Members' runs are ``JobResult`` rows too,
under their msgids (``wf-<workflow id>-<stage>-<member>``).
"""

from __future__ import annotations

from django.db import models


class WorkflowStatus(models.TextChoices):
    RUNNING = "running", "running"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled"


class Workflow(models.Model):
    """A chain, group or chord, from sending to its final result."""

    workflow_id = models.CharField(max_length=32, unique=True)
    kind = models.CharField(max_length=8, db_index=True, help_text="chain, group or chord")
    status = models.CharField(
        max_length=16,
        choices=WorkflowStatus.choices,
        default=WorkflowStatus.RUNNING,
        db_index=True,
    )
    stages = models.JSONField(help_text="The plan: a list of stages, each a list of signatures.")
    #: The last stage sent (0: the first).
    stage = models.IntegerField(default=0, help_text="The last stage sent (from 0).")
    result = models.JSONField(null=True, blank=True, help_text="The final result (JSON).")
    failed_msgid = models.CharField("failed member", max_length=100, blank=True)
    exc_type = models.CharField("exception class", max_length=255, blank=True)
    exc_message = models.TextField("exception message", blank=True)
    created = models.DateTimeField(db_index=True)
    updated = models.DateTimeField()

    class Meta:
        verbose_name = "workflow"
        ordering = ("-created",)

    def __str__(self) -> str:
        return f"{self.kind} {self.workflow_id} ({self.status})"


class WorkflowStep(models.Model):
    """A member that succeeded: its value, committed before the next stage is sent."""

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="steps")
    stage = models.IntegerField()
    member = models.IntegerField()
    msgid = models.CharField(max_length=100, unique=True)
    job = models.CharField(max_length=255, blank=True)
    value = models.JSONField(null=True, blank=True)
    #: Runs that reached this point (more than 1: the member ran again after a
    #: job manager died between recording it and reporting it).
    completions = models.IntegerField(default=1)
    finished = models.DateTimeField()

    class Meta:
        verbose_name = "workflow step"
        ordering = ("stage", "member")
        constraints = [
            models.UniqueConstraint(
                fields=("workflow", "stage", "member"), name="emq_workflow_step_place"
            )
        ]

    def __str__(self) -> str:
        return f"{self.msgid} {self.job}"
