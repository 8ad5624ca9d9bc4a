"""Forms for filing and reviewing quota requests. Field rules live in the services, so the
form and the API refuse exactly the same things with the same messages: the fields the service
checks are optional here (an empty one reaches the service, which names what is missing), and
the API's serializer borrows these fields' messages for input that is not a number or a date."""
from __future__ import annotations

import datetime as dt

from django import forms
from django.core.exceptions import ValidationError

from fleet.models import GpuFlavor
from scheduling import limits

from . import selectors, services


class QuotaRequestForm(forms.Form):
    queue = forms.ModelChoiceField(queryset=None, help_text="The team's queue the quota is for")
    flavor = forms.ModelChoiceField(queryset=GpuFlavor.objects.all())
    requested_nominal = forms.IntegerField(
        label="Requested nominal GPUs", required=False, help_text="GPUs guaranteed to the queue"
    )
    requested_borrowing_limit = forms.IntegerField(
        label="Borrowing limit", required=False, help_text="Most GPUs the queue may borrow; empty = unchanged"
    )
    starts_on = forms.DateField(label="Start date", required=False, widget=forms.DateInput(attrs={"type": "date"}))
    ends_on = forms.DateField(
        label="End date",
        required=False,
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text="Only for a temporary boost: the previous quota comes back on this date",
    )
    justification = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 4}),
        help_text="What the GPUs are for and why the current quota is not enough",
    )

    def __init__(self, *args, user, today: dt.date, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user
        self.today = today
        queues = selectors.queues_fileable_by(user)
        self.fields["queue"].queryset = queues
        self.fields["queue"].label_from_instance = lambda q: f"{q.name} ({q.team.name})"
        self.fields["starts_on"].initial = today
        if len(queues) == 1:
            self.fields["queue"].initial = queues[0].pk

    def clean(self):
        data = super().clean()
        if not data.get("queue") or not data.get("flavor"):
            return data
        try:
            services.quota_request_validate(
                queue=data["queue"],
                flavor=data["flavor"],
                requested_nominal=data.get("requested_nominal"),
                requested_borrowing_limit=data.get("requested_borrowing_limit"),
                starts_on=data.get("starts_on"),
                ends_on=data.get("ends_on"),
                justification=data.get("justification", ""),
                today=self.today,
            )
        except ValidationError as exc:
            # A field the form already refused (e.g. not a number) keeps only that message.
            add_service_errors(self, exc, skip=set(self.errors))
        return data


class ReviewForm(forms.Form):
    comment = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}), required=False, max_length=limits.MAX_COMMENT_LENGTH
    )
    override = forms.BooleanField(
        required=False, label="Override: approve even though it oversubscribes the fleet (audited)"
    )


def add_service_errors(form: forms.Form, exc: ValidationError, *, skip: set[str] = frozenset()) -> None:
    """Put a service's ValidationError next to the fields it names (or on top of the form)."""
    if hasattr(exc, "error_dict"):
        for name, errors in exc.message_dict.items():
            if name not in skip:
                form.add_error(name if name in form.fields else None, errors)
    else:
        form.add_error(None, exc.messages)
