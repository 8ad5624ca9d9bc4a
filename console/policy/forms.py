"""Forms of the policy pages. They parse and render only: scheduling.services.policy and
fleet.services.flavors validate and write, as for the API, and their errors land on these forms'
fields (a quota's on its flavor's row)."""
from __future__ import annotations

import json

from django import forms
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator

from fleet.models import GpuFlavor
from scheduling import limits
from scheduling.models import Cohort, PriorityClass, Queue, Team
from scheduling.services import policy

GPUS = {"min_value": 0, "max_value": limits.MAX_QUOTA_GPUS}


class TeamForm(forms.Form):
    name = forms.CharField(max_length=64)
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    email = forms.EmailField(required=False, help_text="Where notifications for the team go")


class MemberForm(forms.Form):
    username = forms.CharField(max_length=150, label="Add member (username)")


class CohortForm(forms.Form):
    name = forms.CharField(max_length=64)


class DeleteForm(forms.Form):
    """The delete confirmation: no fields, only the CSRF token, and the service's refusal on top."""


class FlavorForm(forms.Form):
    name = forms.CharField(max_length=64, help_text="e.g. H100-SXM-80GB; quotas are set per flavor")
    product = forms.CharField(max_length=128, help_text="NVML product name, e.g. NVIDIA H100 80GB HBM3")
    memory_mib = forms.IntegerField(min_value=1, max_value=2**31 - 1, label="Memory (MiB)")


def _bound(field: forms.IntegerField, low: int, high: int) -> None:
    """The API's bounds on a model form's field: an IntegerField turns min/max into validators
    (and the input's min/max) only when it is built, so setting the attributes later checks nothing."""
    field.min_value, field.max_value = low, high
    field.validators = [v for v in field.validators if not isinstance(v, (MinValueValidator, MaxValueValidator))]
    field.validators += [MinValueValidator(low), MaxValueValidator(high)]
    field.widget.attrs.update(min=low, max=high)


class PriorityClassForm(forms.ModelForm):
    """The model's fields (cooldown and hard preemption included where the model has them)."""

    class Meta:
        model = PriorityClass
        fields = list(policy.priority_class_fields())
        widgets = {"description": forms.Textarea(attrs={"rows": 2})}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _bound(self.fields["value"], -1_000_000, 1_000_000)
        for name in ("grace_seconds", "min_runtime_seconds", "cooldown_seconds"):
            if name in self.fields:
                _bound(self.fields[name], 0, limits.MAX_SECONDS)

    def validate_unique(self):
        """The service checks the name (and answers a taken one in its own words)."""


class QueueForm(forms.Form):
    """The queue and one row of quota fields per flavor of the fleet; an empty nominal means the
    queue has no quota of that flavor. `confirm_overcommit` is the value of the warning's "Save
    anyway" button, shown once the service asked for it: the numbers the warning showed (JSON, as
    the API's over_capacity), so the save holds only while they do."""

    name = forms.CharField(max_length=64)
    team = forms.ModelChoiceField(queryset=Team.objects.all(), to_field_name="name")
    cohort = forms.ModelChoiceField(queryset=Cohort.objects.all(), to_field_name="name", required=False,
                                    empty_label="(none: no borrowing or lending)")
    confirm_overcommit = forms.CharField(required=False, max_length=limits.MAX_COMMENT_LENGTH)

    def __init__(self, *args, queue: Queue | None = None, **kwargs):
        initial = kwargs.pop("initial", {}) or {}
        self.flavors = list(GpuFlavor.objects.order_by("name"))
        if queue is not None:
            initial |= {"name": queue.name, "team": queue.team.name,
                        "cohort": queue.cohort.name if queue.cohort else None}
            initial |= {name: getattr(queue, name) for name in policy.queue_extra_fields()}
            for quota in queue.quotas.all():
                for field in policy.QUOTA_FIELDS:
                    initial[f"{field}_{quota.flavor_id}"] = getattr(quota, field)
        super().__init__(*args, initial=initial, **kwargs)
        for name in policy.queue_extra_fields():
            self.fields[name] = Queue._meta.get_field(name).formfield()
        for flavor in self.flavors:
            self.fields[f"nominal_{flavor.pk}"] = forms.IntegerField(required=False, label=f"{flavor.name} nominal",
                                                                     **GPUS)
            self.fields[f"borrowing_limit_{flavor.pk}"] = forms.IntegerField(
                required=False, label=f"{flavor.name} borrowing limit", **GPUS)
            self.fields[f"lending_limit_{flavor.pk}"] = forms.IntegerField(
                required=False, label=f"{flavor.name} lending limit", **GPUS)

    @property
    def policy_fields(self) -> list:
        return [self[name] for name in ("name", "team", "cohort", *policy.queue_extra_fields())]

    @property
    def quota_rows(self) -> list[tuple[GpuFlavor, list]]:
        return [(f, [self[f"{field}_{f.pk}"] for field in policy.QUOTA_FIELDS]) for f in self.flavors]

    def clean(self):
        data = super().clean()
        for flavor in self.flavors:
            if data.get(f"nominal_{flavor.pk}") is None and any(
                data.get(f"{field}_{flavor.pk}") is not None for field in ("borrowing_limit", "lending_limit")
            ):
                self.add_error(f"nominal_{flavor.pk}", "Enter the nominal quota, or clear this flavor's limits.")
        return data

    def clean_confirm_overcommit(self) -> list[policy.CohortExcess]:
        raw = self.cleaned_data["confirm_overcommit"]
        if not raw:
            return []
        try:
            rows = json.loads(raw)
            if not isinstance(rows, list):
                raise ValueError("a list of excesses")
            return policy.excesses_from_rows(rows)
        except ValueError as exc:
            raise ValidationError(f"Not the numbers of a warning: {exc}") from exc

    def quotas(self) -> list[policy.QuotaSpec]:
        data = self.cleaned_data
        return [
            policy.QuotaSpec(flavor=f, nominal=data[f"nominal_{f.pk}"], borrowing_limit=data[f"borrowing_limit_{f.pk}"],
                             lending_limit=data[f"lending_limit_{f.pk}"])
            for f in self.flavors if data.get(f"nominal_{f.pk}") is not None
        ]

    def service_kwargs(self) -> dict:
        data = self.cleaned_data
        return {"name": data["name"], "team": data["team"], "cohort": data["cohort"], "quotas": self.quotas(),
                "confirm_overcommit": data["confirm_overcommit"], **{n: data[n] for n in policy.queue_extra_fields()}}

    def add_service_errors(self, exc: ValidationError) -> None:
        """A quota's errors (`quotas[i].field`) go to that flavor's row of the form."""
        quotas = self.quotas()
        for key, errors in exc.message_dict.items():
            target = None
            if key.startswith("quotas[") and "." in key:
                index, field = key[len("quotas["):].split("].", 1)
                flavor = quotas[int(index)].flavor
                target = f"{'nominal' if field == 'flavor' else field}_{flavor.pk}"
            elif key in self.fields:
                target = key
            self.add_error(target if target in self.fields else None, errors)


def add_errors(form: forms.Form, exc: ValidationError) -> None:
    """A service's ValidationError on the form: keyed errors on their fields, the rest on top."""
    if not hasattr(exc, "error_dict"):
        form.add_error(None, exc.messages)
        return
    for key, errors in exc.message_dict.items():
        form.add_error(key if key in form.fields else None, errors)
