from django import forms

from .choices import OPERATOR_EVENTS, Event
from .models import NotificationSettings
from .transports import webhook_host_refusal


class NotificationSettingsForm(forms.ModelForm):
    events = forms.MultipleChoiceField(choices=Event.choices, required=False, widget=forms.CheckboxSelectMultiple,
                                       label="Tell me when")
    webhook_url = forms.URLField(required=False, max_length=500, assume_scheme="https", label="Webhook URL")

    class Meta:
        model = NotificationSettings
        fields = ["email_enabled", "webhook_url", "webhook_format", "events", "wait_threshold_minutes"]
        labels = {"email_enabled": "E-mail me", "webhook_format": "Webhook format",
                  "wait_threshold_minutes": "Waiting threshold (minutes)"}

    def __init__(self, *args, operator: bool, **kwargs):
        super().__init__(*args, **kwargs)
        if not operator:
            # Node and ticket events are the operators' to follow.
            self.fields["events"].choices = [(v, label) for v, label in Event.choices if v not in OPERATOR_EVENTS]

    def clean_webhook_url(self) -> str:
        url = self.cleaned_data["webhook_url"].strip()
        if url and not url.startswith(("http://", "https://")):
            raise forms.ValidationError("Must be an http:// or https:// URL.")
        refusal = webhook_host_refusal(url) if url else ""
        if refusal:
            raise forms.ValidationError(refusal[0].upper() + refusal[1:] + ".")
        return url
