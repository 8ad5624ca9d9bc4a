"""Demo workloads: the seed's worked example running on the demo fleet, so a new user sees a
living fleet (allocations, running gangs, a queue with a waiting job) the moment the page opens.

On the H100 pool (n1–n4 in rack r1, n5–n8 in rack r2): train-A (4 × 8, rack preferred,
checkpointing) lands on n1–n4, train-B (2 × 8) on n5–n6 and four 2-GPU evals fill n7, leaving n8
whole. The evals finish within the first hour, so completions show up too. The A100 and L40S
pools get a serving replica, a fine-tune, a MIG job and a milli-GPU share on a time-sliced L40S.
One job asks for all 64 H100s: beyond research's borrowing limit while train-A and train-B run,
it stays pending with the scheduler's reason.

Every workload goes through workload_submit like any user's, then one placement round runs
here (the worker's beat would run it within seconds, but the dashboard should be full even
before the worker starts). Idempotent by name: a workload whose name exists, in any state, is
not submitted again, so loading twice changes nothing."""
from __future__ import annotations

from dataclasses import dataclass, field

from django.contrib.auth.models import User

from core.actors import Actor
from demo.fleet import A100_FLAVOR, H100_FLAVOR, L40S_FLAVOR
from scheduling.models import Workload
from scheduling.services import executor_tick, placement_round_run, workload_submit

HOUR = 3600
# Young's approximation for train-A (2-minute checkpoint, 10 h MTBF) gives ~49 min: the seed
# rounds it to 45.
CHECKPOINT_WRITE_S = 120
CHECKPOINT_INTERVAL_S = 45 * 60


def _gang(name: str, replicas: int, gpus: int, flavor: str, **extra) -> list[dict]:
    return [{"name": name, "replicas": replicas, "gpus_per_replica": gpus, "flavor": flavor, **extra}]


def _training(name: str, nodes: int, run_hours: float) -> dict:
    return {
        "name": name, "team": "research", "priority_class": "training-prod",
        "pod_sets": _gang("worker", nodes, 8, H100_FLAVOR),
        "topology": {"level": "rack", "mode": "preferred"},
        "checkpoint": {"enabled": True, "write_seconds": CHECKPOINT_WRITE_S},
        "run_seconds": int(run_hours * HOUR), "checkpoint_interval_seconds": CHECKPOINT_INTERVAL_S,
    }


def _eval(i: int, minutes: int) -> dict:
    return {
        "name": f"eval-{i}", "team": "evaluation", "priority_class": "research-batch",
        "pod_sets": _gang("main", 1, 2, H100_FLAVOR), "run_seconds": minutes * 60,
    }


# Submission order matters where priorities tie: the evals come before the waiting job, so they
# take n7 as in the seed. (user, spec); the user is the team member who submits it, if any.
DEMO_WORKLOADS: tuple[tuple[str, dict], ...] = (
    ("alice", _training("train-A", 4, 6)),
    ("alice", _training("train-B", 2, 4)),
    # evaluation's H100 nominal is 4 after its give-back (quota_requests/demo.py); the other four
    # are borrowed in the cohort from inference's unused nominal, within its borrowing limit of 8.
    *(("carol", _eval(i, minutes)) for i, minutes in ((1, 20), (2, 30), (3, 45), (4, 60))),
    ("bob", {
        "name": "serve-llama-70b", "team": "inference", "priority_class": "inference-online",
        "pod_sets": _gang("server", 1, 8, A100_FLAVOR), "run_seconds": 7 * 24 * HOUR,
    }),
    ("alice", {
        "name": "finetune-13b", "team": "research", "priority_class": "research-batch",
        "pod_sets": _gang("worker", 1, 4, A100_FLAVOR),
        "checkpoint": {"enabled": True, "write_seconds": 60},
        "run_seconds": 3 * HOUR, "checkpoint_interval_seconds": 30 * 60,
    }),
    ("carol", {
        "name": "tokenizer-bench", "team": "evaluation", "priority_class": "research-batch",
        "pod_sets": [{"name": "main", "replicas": 2, "flavor": A100_FLAVOR, "mig_profile": "1g.10gb"}],
        "run_seconds": 2 * HOUR,
    }),
    ("bob", {
        "name": "embed-api", "team": "inference", "priority_class": "inference-online",
        "pod_sets": [{"name": "server", "replicas": 3, "flavor": L40S_FLAVOR, "milli_gpu": 250}],
        "run_seconds": 7 * 24 * HOUR,
    }),
    ("bob", {
        "name": "rerank-batch", "team": "inference", "priority_class": "opportunistic",
        "pod_sets": _gang("worker", 1, 2, L40S_FLAVOR), "run_seconds": 90 * 60,
    }),
    # All eight H100 nodes, a rack preferred: beyond research's borrowing limit while train-A and
    # train-B run. (Eight nodes in one rack *required* is refused at submission: racks hold four.)
    ("alice", {
        "name": "pretrain-64", "team": "research", "priority_class": "research-batch",
        "pod_sets": _gang("worker", 8, 8, H100_FLAVOR),
        "topology": {"level": "rack", "mode": "preferred"},
        "checkpoint": {"enabled": True, "write_seconds": CHECKPOINT_WRITE_S},
        "run_seconds": 24 * HOUR, "checkpoint_interval_seconds": CHECKPOINT_INTERVAL_S,
    }),
)
# The demo's one stalled GPU, for the simulated telemetry: train-B's last GPU reads idle (a hung
# data loader), so "idle allocated GPUs" lists it once its 30-minute window has passed.
STALLED_WORKLOAD = "train-B"


@dataclass
class WorkloadsResult:
    submitted: list[str] = field(default_factory=list)
    admitted: list[str] = field(default_factory=list)
    pending: int = 0

    def summary(self) -> str:
        return (f"Demo workloads: {len(self.submitted)} submitted, {len(self.admitted)} admitted by the first round, "
                f"{self.pending} pending")


def load() -> WorkloadsResult:
    """Submit the demo workloads that do not exist yet, then run one placement round."""
    result = WorkloadsResult()
    existing = set(Workload.objects.filter(name__in=[spec["name"] for _, spec in DEMO_WORKLOADS])
                   .values_list("name", flat=True))
    users = {u.username: u for u in User.objects.filter(username__in={user for user, _ in DEMO_WORKLOADS})}
    for username, spec in DEMO_WORKLOADS:
        if spec["name"] in existing:
            continue
        user = users.get(username)
        actor = Actor.for_user(user) if user is not None else Actor.automation("demo")
        workload_submit(spec=spec, actor=actor)
        result.submitted.append(spec["name"])
    if result.submitted:
        report = placement_round_run(actor=Actor.automation("demo"))
        executor_tick()  # starts what the round admitted, as the round's Celery task does
        result.admitted = [name for _id, name, _placements in report.admitted]
        result.pending = report.pending
    return result
