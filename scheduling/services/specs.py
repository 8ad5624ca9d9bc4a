"""Reading a submitted workload spec: every error names its field and says what is wrong."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError

from core.validators import text_problem
from fleet.models import Gpu, GpuFlavor
from scheduling import limits
from scheduling.choices import SharingRequest, TopologyLevel, TopologyMode, WorkloadState
from scheduling.models import PodSet, PriorityClass, Queue, Team, Workload
from scheduling.usage import pod_sets_gpus

from .catalogue import Catalogue, PolicyNames, catalogue

TOP_LEVEL_KEYS = {
    "name",
    "team",
    "queue",
    "priority_class",
    "pod_sets",
    "topology",
    "checkpoint",
    "time_limit_seconds",
    "run_seconds",
    "checkpoint_interval_seconds",
    "elastic_min_replicas",
    "mtbf_hours",
}
POD_SET_KEYS = {
    "name",
    "replicas",
    "gpus_per_replica",
    "flavor",
    "accepted_products",
    "milli_gpu",
    "mig_profile",
    "cpu_millicores",
    "memory_mib",
    "image",
    "command",
}
# An image reference as the distribution spec's grammar writes it: [host[:port]/]path[:tag][@digest].
_IMAGE_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_IMAGE_HOST = rf"(?:{_IMAGE_LABEL}(?:\.{_IMAGE_LABEL})*(?::[0-9]+)?/)?"
_IMAGE_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
_IMAGE_TAG = r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
_IMAGE_DIGEST = r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
IMAGE_REFERENCE = re.compile(_IMAGE_HOST + _IMAGE_PATH + _IMAGE_TAG + _IMAGE_DIGEST)


@dataclass
class PodSetDraft:
    name: str
    replicas: int
    gpus_per_replica: int
    flavor: GpuFlavor | None
    sharing: str
    milli_gpu: int | None = None
    mig_profile: str = ""
    accepted_products: list[str] = field(default_factory=list)
    cpu_millicores: int = 0
    memory_mib: int = 0
    image: str = ""
    command: list[str] = field(default_factory=list)


@dataclass
class WorkloadDraft:
    name: str
    team: Team
    queue: Queue
    priority_class: PriorityClass
    pod_sets: list[PodSetDraft]
    topology_level: str = TopologyLevel.NONE
    topology_mode: str = TopologyMode.PREFERRED
    checkpoint_enabled: bool = False
    checkpoint_write_seconds: int = 0
    time_limit_seconds: int | None = None
    run_seconds: int | None = None
    checkpoint_interval_seconds: int | None = None
    elastic_min_replicas: int | None = None
    mtbf_hours: float | None = None

    def workload_row(self, *, submitted_by, now) -> Workload:
        """The unsaved Workload this draft queues (pending since `now`)."""
        return Workload(
            name=self.name,
            team=self.team,
            queue=self.queue,
            priority_class=self.priority_class,
            state=WorkloadState.PENDING,
            topology_level=self.topology_level,
            topology_mode=self.topology_mode,
            time_limit_seconds=self.time_limit_seconds,
            checkpoint_enabled=self.checkpoint_enabled,
            checkpoint_write_seconds=self.checkpoint_write_seconds,
            run_seconds=self.run_seconds,
            checkpoint_interval_seconds=self.checkpoint_interval_seconds,
            elastic_min_replicas=self.elastic_min_replicas,
            mtbf_hours=self.mtbf_hours,
            submitted_by=submitted_by,
            queued_at=now,
            gpus_asked=pod_sets_gpus(self.pod_sets),
        )

    def pod_set_rows(self, workload: Workload) -> list[PodSet]:
        """The unsaved PodSets of this draft, for an already saved `workload`."""
        return [
            PodSet(
                workload=workload,
                name=ps.name,
                replicas=ps.replicas,
                gpus_per_replica=ps.gpus_per_replica,
                flavor=ps.flavor,
                accepted_products=ps.accepted_products,
                sharing=ps.sharing,
                milli_gpu=ps.milli_gpu,
                mig_profile=ps.mig_profile,
                cpu_millicores=ps.cpu_millicores,
                memory_mib=ps.memory_mib,
                image=ps.image,
                command=ps.command,
            )
            for ps in self.pod_sets
        ]


def _fail(field_name: str, reason: str) -> ValidationError:
    return ValidationError({field_name: [reason]})


def _int(value: Any, field_name: str, *, minimum: int, maximum: int, required: bool = True) -> int | None:
    if value is None:
        if required:
            raise _fail(field_name, "This field is required.")
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(field_name, "Must be a whole number.")
    if value < minimum:
        raise _fail(field_name, f"Must be at least {minimum}.")
    if value > maximum:
        raise _fail(field_name, f"Must be at most {maximum}.")
    return value


def _hours(value: Any, field_name: str) -> float | None:
    """An optional number of hours (a whole or decimal number) within the MTBF bounds."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _fail(field_name, "Must be a number of hours.")
    if not limits.MIN_MTBF_HOURS <= value <= limits.MAX_MTBF_HOURS:
        raise _fail(field_name, f"Must be from {limits.MIN_MTBF_HOURS} to {limits.MAX_MTBF_HOURS:.0f} hours.")
    return float(value)


def _str(value: Any, field_name: str, *, required: bool = True, max_length: int = 128) -> str:
    if value is None or value == "":
        if required:
            raise _fail(field_name, "This field is required.")
        return ""
    if not isinstance(value, str):
        raise _fail(field_name, "Must be a string.")
    if len(value) > max_length:
        raise _fail(field_name, f"At most {max_length} characters.")
    problem = text_problem(value)
    if problem:
        raise _fail(field_name, problem)
    return value


def _unknown(field_name: str, name: str) -> ValidationError:
    return _fail(field_name, f"Unknown {field_name.replace('_', ' ')} {name!r}.")


def _mig_profiles(flavor: GpuFlavor | None) -> set[str]:
    gpus = Gpu.objects.filter(mig_enabled=True)
    if flavor is not None:
        gpus = gpus.filter(node__flavor=flavor)
    return {inst.get("profile", "") for insts in gpus.values_list("mig_instances", flat=True) for inst in insts or []}


def _named(known: dict[str, Any], raw: Any, field_name: str) -> Any:
    """The row a spec's field names, or the field's error."""
    name = _str(raw, field_name, max_length=64)
    row = known.get(name)
    if row is None:
        raise _unknown(field_name, name)
    return row


def _queue_of(team: Team, raw_queue: Any, names: PolicyNames) -> Queue:
    """The queue the spec names, one of the team's (its first by name when the spec names none)."""
    if raw_queue is None or raw_queue == "":
        queue = names.default_queues.get(team.pk)
        if queue is None:
            raise _fail("queue", f"Team {team.name!r} has no queue; ask an operator to create one.")
        return queue
    queue = _named(names.queues, raw_queue, "queue")
    if queue.team_id != team.pk:
        raise _fail("queue", f"Queue {queue.name!r} belongs to another team.")
    return queue


def parse_pod_set(raw: Any, index: int, sizes: dict[str | None, int], flavors: dict[str, GpuFlavor]) -> PodSetDraft:
    where = f"pod_sets[{index}]"
    if not isinstance(raw, dict):
        raise _fail(where, "Must be an object.")
    unknown = set(raw) - POD_SET_KEYS
    if unknown:
        raise _fail(f"{where}.{sorted(unknown)[0]}", "Unknown field.")
    name = _str(raw.get("name") or f"ps{index}", f"{where}.name", max_length=limits.MAX_POD_SET_NAME_LENGTH)
    replicas = _int(raw.get("replicas"), f"{where}.replicas", minimum=1, maximum=limits.MAX_REPLICAS)
    flavor = None
    if raw.get("flavor"):
        flavor_name = _str(raw["flavor"], f"{where}.flavor", max_length=64)
        flavor = flavors.get(flavor_name)
        if flavor is None:
            raise _unknown("flavor", flavor_name)
    if isinstance(raw.get("milli_gpu"), int) and raw["milli_gpu"] > 1000:
        raise _fail(f"{where}.milli_gpu", "A share of one GPU is at most 1000 milli.")
    milli = _int(raw.get("milli_gpu"), f"{where}.milli_gpu", minimum=1, maximum=1000, required=False)
    mig = _str(raw.get("mig_profile"), f"{where}.mig_profile", required=False, max_length=32)
    if milli is not None and mig:
        raise _fail(f"{where}.mig_profile", "Ask for either a milli-GPU share or a MIG profile, not both.")
    fractional = milli is not None or bool(mig)
    gpus = _int(
        raw.get("gpus_per_replica", 0 if fractional else 1),
        f"{where}.gpus_per_replica",
        minimum=0,
        maximum=limits.MAX_GPUS_PER_REPLICA,
    )
    if fractional and gpus:
        raise _fail(f"{where}.gpus_per_replica", "Must be 0 (or omitted) with milli_gpu or mig_profile.")
    if not fractional and gpus == 0:
        raise _fail(f"{where}.gpus_per_replica", "Must be at least 1 (or give milli_gpu / mig_profile).")
    if mig and mig not in _mig_profiles(flavor):
        raise _fail(f"{where}.mig_profile", f"No GPU of this flavor offers MIG profile {mig!r}.")
    products = _products(raw.get("accepted_products") or [], f"{where}.accepted_products")
    _check_shape(where, replicas, gpus, flavor, sizes)
    return PodSetDraft(
        name=name,
        replicas=replicas,
        gpus_per_replica=gpus,
        flavor=flavor,
        sharing=SharingRequest.FRACTION if milli else SharingRequest.MIG if mig else SharingRequest.EXCLUSIVE,
        milli_gpu=milli,
        mig_profile=mig,
        accepted_products=products,
        cpu_millicores=_int(
            raw.get("cpu_millicores", 0), f"{where}.cpu_millicores", minimum=0, maximum=limits.MAX_CPU_MILLICORES
        ),
        memory_mib=_int(raw.get("memory_mib", 0), f"{where}.memory_mib", minimum=0, maximum=limits.MAX_MEMORY_MIB),
        image=_image(raw.get("image"), f"{where}.image"),
        command=_command(raw.get("command"), f"{where}.command"),
    )


def _image(raw: Any, field_name: str) -> str:
    """A container image reference (e.g. nvcr.io/nvidia/pytorch:24.05-py3), or "" for the default."""
    image = _str(raw, field_name, required=False, max_length=limits.MAX_IMAGE_LENGTH)
    if image and not IMAGE_REFERENCE.fullmatch(image):
        raise _fail(field_name, "Not an image reference: [registry[:port]/]repository[:tag][@digest], "
                                "the repository in lower case.")
    return image


def _command(raw: Any, field_name: str) -> list[str]:
    """The container's command and arguments (a list of strings, run without a shell), or [] for the default."""
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(arg, str) for arg in raw):
        raise _fail(field_name, "Must be a list of strings (the program, then its arguments).")
    if len(raw) > limits.MAX_COMMAND_ARGS:
        raise _fail(field_name, f"At most {limits.MAX_COMMAND_ARGS} arguments.")
    if raw and not raw[0]:
        raise _fail(f"{field_name}[0]", "The program must not be empty.")
    for index, arg in enumerate(raw):
        _str(arg, f"{field_name}[{index}]", required=False, max_length=limits.MAX_COMMAND_ARG_LENGTH)
    if sum(len(arg) for arg in raw) > limits.MAX_COMMAND_LENGTH:
        raise _fail(field_name, f"At most {limits.MAX_COMMAND_LENGTH} characters in all.")
    return list(raw)


def _products(raw: Any, field_name: str) -> list[str]:
    if not isinstance(raw, list) or not all(isinstance(p, str) and p for p in raw):
        raise _fail(field_name, "Must be a list of GPU product names.")
    if len(raw) > limits.MAX_ACCEPTED_PRODUCTS:
        raise _fail(field_name, f"At most {limits.MAX_ACCEPTED_PRODUCTS} products.")
    for product in raw:
        _str(product, field_name, max_length=limits.MAX_PRODUCT_LENGTH)
    return raw


def _check_shape(where: str, replicas: int, gpus: int, flavor: GpuFlavor | None, sizes: dict) -> None:
    """A replica must fit one node; a pod set spread over nodes must take whole nodes."""
    largest = sizes.get(flavor.name if flavor else None, 0)
    label = f"{flavor.name} node" if flavor else "node"
    if largest == 0:
        raise _fail(f"{where}.flavor", f"No {label} exists.")
    if gpus > largest:
        raise _fail(
            f"{where}.gpus_per_replica", f"{gpus} GPUs per replica is more than the largest {label} ({largest})."
        )
    if replicas > 1 and replicas * gpus > largest and gpus != largest:
        raise _fail(
            f"{where}.gpus_per_replica",
            f"A pod set spanning nodes must take whole nodes: {largest} GPUs per replica, not {gpus}.",
        )


def parse_spec(spec: Any, *, known: Catalogue | None = None) -> WorkloadDraft:
    """Validate a submitted spec (the API's JSON body) into a draft; raises ValidationError.
    `known`: the fleet and policy as the caller read them (by default, as they are now)."""
    if not isinstance(spec, dict):
        raise _fail("non_field_errors", "The body must be a JSON object.")
    unknown = set(spec) - TOP_LEVEL_KEYS
    if unknown:
        raise _fail(sorted(unknown)[0], "Unknown field.")
    name = _str(spec.get("name"), "name", max_length=limits.MAX_WORKLOAD_NAME_LENGTH)
    known = known or catalogue()
    team = _named(known.names.teams, spec.get("team"), "team")
    priority = _named(known.names.priority_classes, spec.get("priority_class"), "priority_class")
    queue = _queue_of(team, spec.get("queue"), known.names)
    raw_sets = spec.get("pod_sets")
    if not isinstance(raw_sets, list) or not raw_sets:
        raise _fail("pod_sets", "At least one pod set is required.")
    if len(raw_sets) > limits.MAX_POD_SETS:
        raise _fail("pod_sets", f"At most {limits.MAX_POD_SETS} pod sets.")
    pod_sets = [parse_pod_set(raw, i, known.fleet.sizes, known.names.flavors) for i, raw in enumerate(raw_sets)]
    names = [ps.name for ps in pod_sets]
    if len(set(names)) != len(names):
        raise _fail("pod_sets", "Pod set names must be unique.")
    total = pod_sets_gpus(pod_sets)  # "GPUs asked", as quota and the size filters count it
    if total > limits.MAX_GPUS_PER_WORKLOAD:
        raise _fail("pod_sets", f"At most {limits.MAX_GPUS_PER_WORKLOAD} GPUs in one workload, not {total}.")
    draft = WorkloadDraft(name=name, team=team, queue=queue, priority_class=priority, pod_sets=pod_sets)
    _parse_topology(spec.get("topology"), draft)
    _parse_checkpoint(spec.get("checkpoint"), draft)
    for seconds in ("time_limit_seconds", "run_seconds", "checkpoint_interval_seconds"):
        setattr(draft, seconds, _int(spec.get(seconds), seconds, minimum=1, maximum=limits.MAX_SECONDS, required=False))
    draft.elastic_min_replicas = _int(
        spec.get("elastic_min_replicas"), "elastic_min_replicas", minimum=1, maximum=limits.MAX_REPLICAS, required=False
    )
    draft.mtbf_hours = _hours(spec.get("mtbf_hours"), "mtbf_hours")
    if draft.elastic_min_replicas is not None:
        if len(pod_sets) != 1:
            raise _fail("elastic_min_replicas", "Only a workload with one pod set can be elastic.")
        if draft.elastic_min_replicas > pod_sets[0].replicas:
            raise _fail("elastic_min_replicas",
                        f"Must be at most the pod set's {pod_sets[0].replicas} replicas.")
    return draft


def _parse_topology(raw: Any, draft: WorkloadDraft) -> None:
    if raw is None:
        return
    if not isinstance(raw, dict):
        raise _fail("topology", "Must be an object with 'level' and 'mode'.")
    level = raw.get("level", TopologyLevel.NONE)
    mode = raw.get("mode", TopologyMode.PREFERRED)
    if level not in TopologyLevel.values:
        raise _fail("topology.level", f"Must be one of {TopologyLevel.values}.")
    if mode not in TopologyMode.values:
        raise _fail("topology.mode", f"Must be one of {TopologyMode.values}.")
    draft.topology_level, draft.topology_mode = level, mode


def _parse_checkpoint(raw: Any, draft: WorkloadDraft) -> None:
    if raw is None:
        return
    if not isinstance(raw, dict):
        raise _fail("checkpoint", "Must be an object with 'enabled' and 'write_seconds'.")
    enabled = raw.get("enabled", False)
    if not isinstance(enabled, bool):
        raise _fail("checkpoint.enabled", "Must be true or false.")
    draft.checkpoint_enabled = enabled
    draft.checkpoint_write_seconds = _int(
        raw.get("write_seconds", 0), "checkpoint.write_seconds", minimum=0, maximum=limits.MAX_SECONDS
    )
