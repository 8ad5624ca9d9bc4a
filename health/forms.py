"""Forms of the health pages: every operator action on a ticket carries a reason."""
from django import forms

from health.choices import TicketState


class TicketTransitionForm(forms.Form):
    to = forms.ChoiceField(choices=TicketState.choices)
    reason = forms.CharField(max_length=2000, strip=True,
                             error_messages={"required": "Give a reason: it is recorded with the ticket."})


class BurnInForm(forms.Form):
    passed = forms.TypedChoiceField(choices=[("yes", "Passed"), ("no", "Failed")], coerce=lambda v: v == "yes")
    details = forms.CharField(max_length=8000, strip=True,
                              error_messages={"required": "Describe the burn-in (test, duration, result)."})


class EventFilterForm(forms.Form):
    node = forms.CharField(required=False, max_length=64)
    kind = forms.CharField(required=False, max_length=24)
    severity = forms.CharField(required=False, max_length=8)
