"""The workload submit form: the page's fields turned into the API's body, validated by the same
service (scheduling.services.specs.parse_spec through workload_submit), so the page refuses
exactly what the API refuses, with the same words, on the field that caused it."""
from __future__ import annotations

import math
import re
import shlex
from typing import Any

from django import forms

from core.roles import is_operator, team_ids
from fleet.models import GpuFlavor

from .choices import TopologyLevel, TopologyMode
from .models import PriorityClass, Queue, Team

TOPOLOGY = {
    "": None,
    "rack-required": {"level": TopologyLevel.RACK, "mode": TopologyMode.REQUIRED},
    "rack-preferred": {"level": TopologyLevel.RACK, "mode": TopologyMode.PREFERRED},
}
KINDS = (("whole", "Whole GPUs"), ("mig", "A MIG slice per replica"), ("share", "A share of one GPU per replica"))
# Spec keys (as the service names them) → this form's fields.
_FIELD_OF = {
    "pod_sets[0].replicas": "replicas",
    "pod_sets[0].gpus_per_replica": "gpus_per_replica",
    "pod_sets[0].flavor": "flavor",
    "flavor": "flavor",
    "pod_sets[0].accepted_products": "accepted_products",
    "pod_sets[0].milli_gpu": "milli_gpu",
    "pod_sets[0].mig_profile": "mig_profile",
    "pod_sets[0].image": "image",
    "pod_sets[0].command": "command",
    "pod_sets[0].name": "name",
    "pod_sets": "replicas",
    "topology": "topology",
    "topology.level": "topology",
    "topology.mode": "topology",
    "checkpoint": "checkpoint_enabled",
    "checkpoint.enabled": "checkpoint_enabled",
    "checkpoint.write_seconds": "checkpoint_write_seconds",
}
_WHOLE_NUMBER = re.compile(r"-?[0-9]{1,19}")


def _number(raw: str) -> Any:
    """A whole number as the API body would carry it; anything else as typed, so the service
    refuses it with the API's own words ("Must be a whole number.")."""
    raw = raw.strip()
    return int(raw) if _WHOLE_NUMBER.fullmatch(raw) else raw


def _decimal(raw: str) -> Any:
    try:
        value = float(raw)
    except ValueError:
        return raw.strip()
    return value if math.isfinite(value) else raw.strip()


def _text(**kwargs) -> forms.CharField:
    return forms.CharField(required=False, max_length=kwargs.pop("max_length", 200), **kwargs)


class WorkloadSubmitForm(forms.Form):
    name = _text(max_length=200)
    team = forms.ChoiceField(choices=())
    queue = forms.ChoiceField(choices=(), required=False, help_text="Empty: the team's first queue")
    priority_class = forms.ChoiceField(choices=())
    replicas = _text(label="Gang size (replicas)", initial="1", max_length=20)
    kind = forms.ChoiceField(choices=KINDS, initial="whole", label="Each replica gets")
    gpus_per_replica = _text(label="GPUs per replica", initial="1", max_length=20)
    mig_profile = _text(label="MIG profile", max_length=64, help_text="e.g. 3g.40gb")
    milli_gpu = _text(label="Share of one GPU (milli)", max_length=20, help_text="1–1000, e.g. 500 for half a GPU")
    flavor = forms.ChoiceField(choices=(), required=False)
    accepted_products = _text(label="Accepted GPU products", max_length=1000,
                              help_text="Comma-separated, e.g. NVIDIA H100 80GB HBM3; empty: any of the flavor")
    topology = forms.ChoiceField(choices=(("", "No constraint"), ("rack-required", "Same rack, required"),
                                          ("rack-preferred", "Same rack, preferred")), required=False)
    time_limit_seconds = _text(label="Time limit (seconds)", max_length=20)
    checkpoint_enabled = forms.BooleanField(label="Writes checkpoints", required=False)
    checkpoint_write_seconds = _text(label="Checkpoint write time (seconds)", max_length=20)
    checkpoint_interval_seconds = _text(label="Checkpoint interval (seconds)", max_length=20)
    elastic_min_replicas = _text(label="Elastic minimum replicas", max_length=20,
                                 help_text="May restart with this many replicas after a failure")
    mtbf_hours = _text(label="Job MTBF (hours)", max_length=20,
                       help_text="This job's own mean time between failures for its checkpoint advice; empty: "
                                 "the fleet's")
    image = _text(max_length=1000, help_text="Container image (Kubernetes pools)")
    command = _text(max_length=4000, help_text="Command, as a shell would split it")

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        teams = Team.objects.order_by("name")
        if not is_operator(user):
            teams = teams.filter(pk__in=team_ids(user))
        self.fields["team"].choices = [(t.name, t.name) for t in teams]
        self.fields["queue"].choices = [("", "The team's first queue")] + [
            (q.name, f"{q.name} ({q.team.name})") for q in Queue.objects.filter(team__in=teams).select_related("team")
            .order_by("team__name", "name")]
        self.fields["priority_class"].choices = [(p.name, p.name) for p in PriorityClass.objects.order_by("-value")]
        self.fields["flavor"].choices = [("", "Any flavor")] + [
            (f.name, f.name) for f in GpuFlavor.objects.order_by("name")]

    def spec(self) -> dict[str, Any]:
        """The API body this form describes (call after is_valid())."""
        data = self.cleaned_data
        pod_set: dict[str, Any] = {"name": "main", "replicas": _number(data["replicas"] or "")}
        kind = data["kind"]
        if kind == "whole":
            pod_set["gpus_per_replica"] = _number(data["gpus_per_replica"] or "")
        elif kind == "mig":
            pod_set["mig_profile"] = data["mig_profile"]
        else:
            pod_set["milli_gpu"] = _number(data["milli_gpu"] or "")
        if data["flavor"]:
            pod_set["flavor"] = data["flavor"]
        if data["accepted_products"].strip():
            pod_set["accepted_products"] = [p.strip() for p in data["accepted_products"].split(",") if p.strip()]
        if data["image"].strip():
            pod_set["image"] = data["image"].strip()
        if data["command"].strip():
            pod_set["command"] = shlex.split(data["command"])
        spec: dict[str, Any] = {"name": data["name"], "team": data["team"], "priority_class": data["priority_class"],
                                "pod_sets": [pod_set]}
        if data["queue"]:
            spec["queue"] = data["queue"]
        if TOPOLOGY[data["topology"]]:
            spec["topology"] = TOPOLOGY[data["topology"]]
        if data["checkpoint_enabled"] or data["checkpoint_write_seconds"].strip():
            spec["checkpoint"] = {"enabled": data["checkpoint_enabled"],
                                  "write_seconds": _number(data["checkpoint_write_seconds"] or "0")}
        for key in ("time_limit_seconds", "checkpoint_interval_seconds", "elastic_min_replicas"):
            if data[key].strip():
                spec[key] = _number(data[key])
        if data["mtbf_hours"].strip():
            spec["mtbf_hours"] = _decimal(data["mtbf_hours"])
        return spec

    def clean_command(self) -> str:
        try:
            shlex.split(self.cleaned_data["command"])
        except ValueError as exc:  # an unclosed quote
            raise forms.ValidationError(f"Cannot split the command: {exc}.") from exc
        return self.cleaned_data["command"]

    def add_service_errors(self, errors: dict[str, list[str]]) -> None:
        """The service's errors (keyed by spec field) on this form's fields."""
        for key, messages in errors.items():
            field = _FIELD_OF.get(key, key if key in self.fields else None)
            for message in messages:
                self.add_error(self._field_for(key, message, field), message)

    def _field_for(self, key: str, message: str, field: str | None) -> str | None:
        """The never-fit check names the whole pod set ("pod_sets"); when what can never fit is
        the accepted GPU products the person typed, the words go on that field, not on the gang size."""
        typed = self.cleaned_data.get("accepted_products", "").strip()
        if key == "pod_sets" and typed and "accepted product" in message:
            return "accepted_products"
        return field
