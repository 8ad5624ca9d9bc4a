"""Teams, queues and quotas; priority classes; workloads, their pod sets and allocations."""
from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator, MaxValueValidator, MinValueValidator
from django.db import models, transaction
from django.db.models import F, Q

from core.validators import validate_storable_text
from fleet.models import Gpu, GpuFlavor

from . import limits
from .choices import (
    ACTIVE_STATES,
    WAITING_STATES,
    QuotaRequestState,
    ReclaimPolicy,
    SharingRequest,
    TopologyLevel,
    TopologyMode,
    WorkloadState,
)
from .usage import pod_set_asked_label, pod_sets_gpus


def _at_most(bound: int) -> list:
    return [MaxValueValidator(bound)]


def _between(low: int, high: int) -> list:
    return [MinValueValidator(low), MaxValueValidator(high)]


QUOTA_GPUS = _at_most(limits.MAX_QUOTA_GPUS)
SECONDS = _at_most(limits.MAX_SECONDS)


class Team(models.Model):
    """A group of people who share quota and submit workloads."""

    name = models.CharField(max_length=64, unique=True)
    description = models.TextField(blank=True)
    email = models.EmailField(blank=True, help_text="Where notifications for the team go")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class TeamMembership(models.Model):
    """A user belongs to a team (the 'team member' role)."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="team_memberships")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "user"], name="%(app_label)s_%(class)s_unique_team_user")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team}"


class Cohort(models.Model):
    """Queues in a cohort lend each other idle nominal quota (Kueue's cohort)."""

    name = models.CharField(max_length=64, unique=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Queue(models.Model):
    """A team's queue (Kueue's ClusterQueue): quota per flavor, optionally in a cohort."""

    name = models.CharField(max_length=64, unique=True)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="queues")
    cohort = models.ForeignKey(Cohort, null=True, blank=True, on_delete=models.SET_NULL, related_name="queues")
    reclaim_within_cohort = models.CharField(
        max_length=16, choices=ReclaimPolicy.choices, default=ReclaimPolicy.ANY,
        help_text="Below its nominal quota, whom the queue may preempt among the cohort's borrowers "
                  "(gracefully): never, lower-priority borrowers only, or any borrower",
    )
    borrow_non_preemptible = models.BooleanField(
        default=False,
        help_text="Work of a non-preemptible priority class may borrow from the cohort (it can then not be reclaimed)",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class QueueQuota(models.Model):
    """Quota of one flavor in one queue. Null limits mean 'no limit'."""

    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="quotas")
    flavor = models.ForeignKey(GpuFlavor, on_delete=models.PROTECT, related_name="quotas")
    nominal = models.PositiveIntegerField(validators=QUOTA_GPUS, help_text="GPUs guaranteed to the queue")
    borrowing_limit = models.PositiveIntegerField(
        null=True, blank=True, validators=QUOTA_GPUS,
        help_text="Most GPUs the queue may borrow from its cohort; empty = unlimited",
    )
    lending_limit = models.PositiveIntegerField(
        null=True, blank=True, validators=QUOTA_GPUS,
        help_text="Most of its idle nominal GPUs the cohort may borrow; empty = all",
    )

    class Meta:
        ordering = ["queue__name", "flavor__name"]
        constraints = [
            models.UniqueConstraint(fields=["queue", "flavor"], name="%(app_label)s_%(class)s_unique_queue_flavor"),
            models.CheckConstraint(
                condition=Q(lending_limit__isnull=True) | Q(lending_limit__lte=F("nominal")),
                name="%(app_label)s_%(class)s_lending_within_nominal",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.queue}: {self.nominal} × {self.flavor}"


class PriorityClass(models.Model):
    """Priority and preemption policy of a class of workloads."""

    name = models.CharField(max_length=64, unique=True)
    value = models.IntegerField(help_text="Higher runs first; negative runs only on otherwise idle GPUs")
    preemptible = models.BooleanField(default=True, help_text="Workloads of this class may be preempted")
    may_preempt = models.BooleanField(default=False, help_text="Workloads of this class may preempt others")
    grace_seconds = models.PositiveIntegerField(default=60, help_text="Time a victim gets to checkpoint")
    min_runtime_seconds = models.PositiveIntegerField(default=600, help_text="Never preempted before this")
    cooldown_seconds = models.PositiveIntegerField(
        default=3600, validators=SECONDS, help_text="Not preempted again this long after a preemption"
    )
    hard_preemption = models.BooleanField(
        default=False,
        help_text="Workloads of this class may preempt work that does not checkpoint (its work since start is lost)",
    )
    description = models.TextField(blank=True)

    class Meta:
        ordering = ["-value"]
        verbose_name_plural = "priority classes"

    def __str__(self) -> str:
        return self.name


class WorkloadQuerySet(models.QuerySet):
    def waiting(self) -> WorkloadQuerySet:
        return self.filter(state__in=WAITING_STATES)

    def active(self) -> WorkloadQuerySet:
        return self.filter(state__in=ACTIVE_STATES)

    def visible_to(self, user) -> WorkloadQuerySet:
        """Everyone logged in may read workloads; kept as the single gate should that change."""
        return self if user.is_authenticated else self.none()

    def gpus_asked_refresh(self) -> int:
        """Store these workloads' GPUs asked from their pod sets (scheduling.usage.pod_sets_gpus),
        for pod sets written in bulk without a WorkloadDraft (a benchmark's fleet); returns the
        number of workloads written."""
        pod_sets: dict[int, list[PodSet]] = {pk: [] for pk in self.values_list("pk", flat=True)}
        for ps in PodSet.objects.filter(workload__in=self.values("pk")).only(
                "workload_id", "replicas", "gpus_per_replica", "milli_gpu", "mig_profile"):
            pod_sets[ps.workload_id].append(ps)
        rows = [Workload(pk=pk, gpus_asked=pod_sets_gpus(sets)) for pk, sets in pod_sets.items()]
        return Workload.objects.bulk_update(rows, ["gpus_asked"], batch_size=2000)


class Workload(models.Model):
    """A job: one or more pod sets that start together (a gang) or not at all."""

    name = models.CharField(max_length=limits.MAX_WORKLOAD_NAME_LENGTH, validators=[validate_storable_text])
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="workloads")
    queue = models.ForeignKey(Queue, on_delete=models.PROTECT, related_name="workloads")
    priority_class = models.ForeignKey(PriorityClass, on_delete=models.PROTECT, related_name="workloads")
    state = models.CharField(max_length=16, choices=WorkloadState.choices, default=WorkloadState.PENDING)
    topology_level = models.CharField(max_length=8, choices=TopologyLevel.choices, default=TopologyLevel.NONE)
    topology_mode = models.CharField(max_length=16, choices=TopologyMode.choices, default=TopologyMode.PREFERRED)
    time_limit_seconds = models.PositiveIntegerField(null=True, blank=True, validators=SECONDS)
    checkpoint_enabled = models.BooleanField(default=False)
    checkpoint_write_seconds = models.PositiveIntegerField(default=0, validators=SECONDS)
    last_checkpoint_at = models.DateTimeField(null=True, blank=True)
    elastic_min_replicas = models.PositiveIntegerField(null=True, blank=True, validators=_at_most(limits.MAX_REPLICAS))
    mtbf_hours = models.FloatField(
        null=True, blank=True, validators=_between(limits.MIN_MTBF_HOURS, limits.MAX_MTBF_HOURS),
        help_text="The job's own mean time between failures, for its checkpoint advice (empty: the fleet's)",
    )
    # Simulated executor: how long the job runs and how often it checkpoints.
    run_seconds = models.PositiveIntegerField(null=True, blank=True, validators=SECONDS)
    checkpoint_interval_seconds = models.PositiveIntegerField(null=True, blank=True, validators=SECONDS)
    progress_step = models.BigIntegerField(default=0, validators=_between(0, limits.MAX_STEP))
    last_progress_at = models.DateTimeField(null=True, blank=True)
    pending_reason = models.CharField(max_length=40, blank=True)
    pending_message = models.TextField(blank=True)
    # The round's estimate of when a waiting workload starts, and what bounds it (null: unknown).
    estimated_start_at = models.DateTimeField(null=True, blank=True)
    estimated_start_basis = models.CharField(max_length=200, blank=True)
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    submitted_at = models.DateTimeField(auto_now_add=True, db_index=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    last_preempted_at = models.DateTimeField(null=True, blank=True)
    requeue_count = models.PositiveIntegerField(default=0)
    # Written with the pod sets (WorkloadDraft.workload_row, PodSet.save, gpus_asked_refresh),
    # which never change after: the one rule's number, stored so pages and the API sort and
    # filter by size in the database instead of a second formula in SQL.
    gpus_asked = models.PositiveIntegerField(
        default=0, editable=False,
        help_text="GPUs the workload asks for, as quota counts them on admission: whole GPUs per replica × "
                  "replicas, MIG slices and GPU shares added up per pod set and rounded up",
    )
    # When the current wait began (submission or the last requeue): time-to-bind counts from here.
    queued_at = models.DateTimeField(null=True, blank=True)
    time_to_bind = models.DurationField(null=True, blank=True, help_text="Wait of the last admission")
    # Step of the last checkpoint, and the step the current run resumed from (a requeue resumes
    # from the checkpoint, so the work after it is lost).
    checkpoint_step = models.BigIntegerField(default=0)
    resume_step = models.BigIntegerField(default=0)
    lost_gpu_seconds = models.FloatField(default=0.0, help_text="Work thrown away by stops, all runs together")
    # GPUs per flavor borrowed from the cohort at admission: the first to go when a lender reclaims.
    borrowed = models.JSONField(default=dict, blank=True)
    # A preemptor's claim on the GPUs its victims freed, carried across rounds until it is placed.
    reserved_placements = models.JSONField(default=list, blank=True)
    executor = models.CharField(max_length=16, blank=True, help_text="Executor that runs the workload")
    executor_job_id = models.CharField(max_length=128, blank=True, help_text="e.g. the Slurm job id")
    devices = models.JSONField(
        default=list, blank=True,
        help_text="The devices each replica of the run that last started got, as the backend's API reports them "
                  "(Kubernetes DRA ResourceClaim allocations); empty where the API does not say (a device plugin)",
    )

    objects = WorkloadQuerySet.as_manager()

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [
            models.Index(fields=["state", "queue"], name="sched_workload_state_queue"),
            # The workloads table and API sorted by size, a page at a time (ties in id order).
            models.Index(fields=["gpus_asked", "id"], name="sched_workload_gpus_asked"),
            # Each queue's first waiting workloads per priority class, in submission order: the
            # round reads ROUND_QUEUE_DEPTH of them per queue however deep the backlog is.
            models.Index(
                fields=["queue", "priority_class", "submitted_at", "id"],
                condition=models.Q(state__in=WAITING_STATES),
                name="sched_workload_waiting_order",
            ),
            # The few waiting workloads holding a reservation, found without reading the backlog:
            # every round clears the ones it no longer wants.
            models.Index(
                fields=["id"],
                condition=models.Q(state__in=WAITING_STATES) & ~models.Q(reserved_placements=[]),
                name="sched_workload_reserved",
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=WorkloadState.values), name="%(app_label)s_%(class)s_state_valid"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if self.queue_id and self.team_id and self.queue.team_id != self.team_id:
            raise ValidationError({"queue": "The queue belongs to another team."})

    @property
    def eta(self) -> dict | None:
        """While waiting: when the last round expected it to start and what bounds that, or
        "unknown" when nothing does (no time limit, grace period or minimum runtime ahead of it)."""
        if self.state not in WAITING_STATES:
            return None
        if self.estimated_start_at is None:
            return {"at": None, "basis": "unknown"}
        return {"at": self.estimated_start_at, "basis": self.estimated_start_basis}

    @property
    def gpus_asked_label(self) -> str:
        """What the workload asks for, in words, pod set by pod set (scheduling.usage.pod_set_asked_label)."""
        return " + ".join(
            pod_set_asked_label(replicas=ps.replicas, gpus_per_replica=ps.gpus_per_replica, milli_gpu=ps.milli_gpu,
                                mig_profile=ps.mig_profile)
            for ps in self.pod_sets.all()
        )


class PodSet(models.Model):
    """A group of identical replicas inside a workload (e.g. 4 workers × 8 GPUs)."""

    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="pod_sets")
    name = models.CharField(max_length=limits.MAX_POD_SET_NAME_LENGTH, validators=[validate_storable_text])
    replicas = models.PositiveIntegerField(validators=_between(1, limits.MAX_REPLICAS))
    gpus_per_replica = models.PositiveIntegerField(default=1, validators=_at_most(limits.MAX_GPUS_PER_REPLICA))
    flavor = models.ForeignKey(
        GpuFlavor, null=True, blank=True, on_delete=models.PROTECT, related_name="+", help_text="Empty = any"
    )
    accepted_products = models.JSONField(default=list, blank=True, help_text="GPU models the replica accepts")
    sharing = models.CharField(max_length=16, choices=SharingRequest.choices, default=SharingRequest.EXCLUSIVE)
    milli_gpu = models.PositiveIntegerField(
        null=True, blank=True, validators=_between(1, 1000), help_text="Share of one GPU, 1..1000"
    )
    mig_profile = models.CharField(max_length=32, blank=True)
    cpu_millicores = models.PositiveIntegerField(default=0, validators=_at_most(limits.MAX_CPU_MILLICORES))
    memory_mib = models.PositiveBigIntegerField(default=0, validators=_at_most(limits.MAX_MEMORY_MIB))
    image = models.CharField(
        max_length=limits.MAX_IMAGE_LENGTH, blank=True, validators=[validate_storable_text],
        help_text="Container image (the Kubernetes executor's Job); empty = KUBERNETES_JOB_IMAGE",
    )
    command = models.JSONField(
        default=list, blank=True, help_text="Container command and arguments; empty = the executor's default"
    )

    class Meta:
        ordering = ["workload_id", "id"]
        constraints = [
            models.UniqueConstraint(fields=["workload", "name"], name="%(app_label)s_%(class)s_unique_name"),
            models.CheckConstraint(condition=Q(replicas__gte=1), name="%(app_label)s_%(class)s_replicas_pos"),
            models.CheckConstraint(
                condition=Q(milli_gpu__isnull=True) | Q(milli_gpu__gte=1, milli_gpu__lte=1000),
                name="%(app_label)s_%(class)s_milli_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workload}/{self.name}"

    def save(self, *args, **kwargs) -> None:
        """A pod set saved one at a time (a fixture, a shell) keeps its workload's gpus_asked right;
        submissions write both in bulk through WorkloadDraft instead."""
        with transaction.atomic():
            super().save(*args, **kwargs)
            asked = pod_sets_gpus(PodSet.objects.filter(workload_id=self.workload_id))
            Workload.objects.filter(pk=self.workload_id).update(gpus_asked=asked)
        if PodSet.workload.is_cached(self):
            self.workload.gpus_asked = asked


class Allocation(models.Model):
    """A replica's hold on a GPU (whole, a milli-GPU share, or a MIG instance).

    Active while `released_at` is null. An exclusive GPU has at most one active allocation: a
    partial unique index makes a double allocation impossible, not just unlikely. Shares are
    kept within 1000 milli per GPU by scheduling.services.allocation, under row locks."""

    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="allocations")
    pod_set = models.ForeignKey(PodSet, on_delete=models.CASCADE, related_name="allocations")
    replica = models.PositiveIntegerField()
    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="allocations")
    # Denormalised from gpu.node so "what runs on node X" is one indexed lookup (drain, health).
    node = models.ForeignKey("fleet.Node", null=True, on_delete=models.PROTECT, related_name="allocations")
    exclusive = models.BooleanField(default=True)
    milli = models.PositiveIntegerField(default=1000)
    mig_instance = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["workload_id", "pod_set_id", "replica", "gpu_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["gpu"],
                condition=Q(released_at__isnull=True, exclusive=True),
                name="%(app_label)s_%(class)s_one_exclusive_per_gpu",
            ),
            models.UniqueConstraint(
                fields=["gpu", "mig_instance"],
                condition=Q(released_at__isnull=True) & ~Q(mig_instance=""),
                name="%(app_label)s_%(class)s_one_per_mig_instance",
            ),
            models.UniqueConstraint(
                fields=["workload", "pod_set", "replica", "gpu"],
                condition=Q(released_at__isnull=True),
                name="%(app_label)s_%(class)s_unique_replica_gpu",
            ),
            models.CheckConstraint(
                condition=Q(milli__gte=1, milli__lte=1000), name="%(app_label)s_%(class)s_milli_range"
            ),
            models.CheckConstraint(
                condition=Q(exclusive=False) | Q(milli=1000), name="%(app_label)s_%(class)s_exclusive_whole"
            ),
        ]
        indexes = [
            models.Index(fields=["gpu"], condition=Q(released_at__isnull=True), name="sched_alloc_active"),
            models.Index(fields=["node"], condition=Q(released_at__isnull=True), name="sched_alloc_active_node"),
        ]

    def __str__(self) -> str:
        return f"{self.workload} r{self.replica} → {self.gpu}"


class WorkloadTransition(models.Model):
    """One state change of a workload, with its reason."""

    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="transitions")
    at = models.DateTimeField(auto_now_add=True)
    from_state = models.CharField(max_length=16, choices=WorkloadState.choices, blank=True)
    to_state = models.CharField(max_length=16, choices=WorkloadState.choices)
    reason = models.TextField(blank=True)
    actor = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.workload}: {self.from_state or '∅'} → {self.to_state}"


class Preemption(models.Model):
    """A graceful preemption: the victim gets its class's grace period, then its GPUs go to the
    preemptor in a later round."""

    preemptor = models.ForeignKey(
        Workload, null=True, blank=True, on_delete=models.SET_NULL, related_name="preemptions_caused"
    )
    victim = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="preemptions_suffered")
    reason = models.CharField(max_length=40)
    message = models.TextField(blank=True)
    requested_at = models.DateTimeField()
    grace_seconds = models.PositiveIntegerField()
    deadline = models.DateTimeField()
    completed_at = models.DateTimeField(null=True, blank=True)
    lost_gpu_seconds = models.FloatField(default=0.0)

    class Meta:
        ordering = ["-requested_at", "-id"]

    def __str__(self) -> str:
        return f"{self.preemptor} preempts {self.victim}"


class QuotaRequest(models.Model):
    """A team's request to change its queue's quota of one flavor, reviewed by an operator.

    A temporary boost has an end date; when it passes, the previous values are restored."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="quota_requests")
    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="quota_requests")
    flavor = models.ForeignKey(GpuFlavor, on_delete=models.PROTECT, related_name="+")
    requested_nominal = models.PositiveIntegerField(validators=QUOTA_GPUS)
    requested_borrowing_limit = models.PositiveIntegerField(null=True, blank=True, validators=QUOTA_GPUS)
    starts_on = models.DateField()
    ends_on = models.DateField(null=True, blank=True, help_text="Empty: permanent; set: a temporary boost")
    justification = models.TextField(
        validators=[MaxLengthValidator(limits.MAX_JUSTIFICATION_LENGTH), validate_storable_text]
    )
    state = models.CharField(max_length=16, choices=QuotaRequestState.choices, default=QuotaRequestState.SUBMITTED)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="quota_requests"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reviewed_at = models.DateTimeField(null=True, blank=True)
    review_comment = models.TextField(blank=True, validators=[MaxLengthValidator(limits.MAX_COMMENT_LENGTH)])
    applied_at = models.DateTimeField(null=True, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True)
    # What the quota was before it was applied, so an expiring boost can be reverted.
    previous_nominal = models.PositiveIntegerField(null=True, blank=True)
    previous_borrowing_limit = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "flavor"],
                condition=Q(state="submitted"),
                name="%(app_label)s_%(class)s_one_open_per_team_flavor",
            ),
            models.CheckConstraint(
                condition=Q(ends_on__isnull=True) | Q(ends_on__gt=F("starts_on")),
                name="%(app_label)s_%(class)s_ends_after_start",
            ),
            models.CheckConstraint(
                condition=Q(state__in=QuotaRequestState.values), name="%(app_label)s_%(class)s_state_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team}: {self.requested_nominal} × {self.flavor} ({self.state})"

    def clean(self) -> None:
        if self.ends_on and self.starts_on and self.ends_on <= self.starts_on:
            raise ValidationError({"ends_on": "The end date must be after the start date."})
        if self.queue_id and self.team_id and self.queue.team_id != self.team_id:
            raise ValidationError({"queue": "The queue belongs to another team."})


class SubmissionKey(models.Model):
    """An Idempotency-Key a user sent with a workload submission: the same key within
    limits.IDEMPOTENCY_WINDOW_SECONDS returns this workload instead of queueing another. Written
    in the transaction that creates the workload; the unique (user, key) pair is what makes two
    racing retries create one workload."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=limits.MAX_IDEMPOTENCY_KEY_LENGTH)
    body_sha256 = models.CharField(max_length=64, help_text="Digest of the submitted spec")
    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "key"], name="%(app_label)s_%(class)s_unique_user_key")
        ]

    def __str__(self) -> str:
        return f"{self.user}: {self.key} → workload {self.workload_id}"


class QueueUsageSample(models.Model):
    """A periodic sample of one queue's use of one flavor, for usage history and sizing signals."""

    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="usage_samples")
    flavor = models.ForeignKey(GpuFlavor, on_delete=models.CASCADE, related_name="+")
    at = models.DateTimeField(db_index=True)
    nominal = models.PositiveIntegerField()
    in_use = models.PositiveIntegerField()
    borrowed = models.PositiveIntegerField(default=0)
    lent = models.PositiveIntegerField(default=0)
    pending_demand = models.PositiveIntegerField(default=0)
    utilised = models.FloatField(default=0.0, help_text="GPUs' worth of SM activity (sum of SM-active fractions)")

    class Meta:
        ordering = ["queue_id", "flavor_id", "at"]
        indexes = [models.Index(fields=["queue", "flavor", "at"], name="sched_usage_q_f_at")]

    def __str__(self) -> str:
        return f"{self.queue}/{self.flavor} @ {self.at:%Y-%m-%d %H:%M}"


class PlacementRound(models.Model):
    """One placement round's outcome and phase durations (for the dashboard and /metrics)."""

    started_at = models.DateTimeField(db_index=True)
    actor = models.CharField(max_length=150, blank=True)
    skipped = models.BooleanField(default=False, help_text="Another round held the commit lock")
    load_ms = models.FloatField(default=0.0)
    compute_ms = models.FloatField(default=0.0)
    commit_ms = models.FloatField(default=0.0)
    followup_ms = models.FloatField(default=0.0)
    total_ms = models.FloatField(default=0.0)
    pending = models.PositiveIntegerField(
        default=0, help_text="Waiting workloads the round considered (ROUND_QUEUE_DEPTH per queue) and left waiting")
    admitted = models.PositiveIntegerField(default=0)
    dropped = models.PositiveIntegerField(default=0, help_text="Admissions whose GPUs were taken meanwhile")
    preempted = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        return f"round {self.started_at:%H:%M:%S}: {self.admitted} admitted"


class SchedulerLock(models.Model):
    """A row each round's commit updates first. On SQLite, whose transactions here begin
    IMMEDIATE, that write serialises rounds; PostgreSQL uses an advisory lock as well."""

    name = models.CharField(max_length=32, primary_key=True)
    holder = models.CharField(max_length=150, blank=True)
    acquired_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.name


class StateChange(models.Model):
    """A change the placement round's state cache (scheduling.state_cache) must see: a node
    ('n', object_id = node id), a workload that holds or held GPUs ('w') or anything that
    renames what the cache holds ('r': reload it all). Written only by database triggers
    (migration 0012) on nodes, GPUs, allocations, workloads and the tables they name, so every
    process's writes are seen however they were made (services, bulk updates, the admin).
    `stamp` is random: a cache tells a row it applied from one that reused its id after a
    rollback (SQLite reuses ids). `xact` is the writing transaction (txid_current(), PostgreSQL
    only, migration 0016): the round that committed a row knows it as its own
    (state_cache.round_committed)."""

    id = models.BigAutoField(primary_key=True)
    kind = models.CharField(max_length=1)
    object_id = models.BigIntegerField(default=0)
    stamp = models.BigIntegerField(default=0)
    xact = models.BigIntegerField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.kind}{self.object_id}"


class PolicyChange(models.Model):
    """One write to a table whose rows submission looks up by name: teams, queues, priority
    classes and GPU flavors (inserted, updated, deleted). Written only by database triggers
    (migration 0017), so every writer counts (policy services, the admin, bulk updates); rows are
    only inserted and pruned hourly (scheduling.services.catalogue.policy_changes_prune). The
    newest row is the policy's version: each process keeps those rows by name until it changes
    (scheduling.services.catalogue). `stamp` is random: SQLite reuses the ids of rolled-back
    rows."""

    id = models.BigAutoField(primary_key=True)
    stamp = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"policy change {self.id}"
