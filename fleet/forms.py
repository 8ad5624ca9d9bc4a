"""Forms of the fleet pages."""
from django import forms


class NodeReasonForm(forms.Form):
    """Cordon / uncordon: a reason is required (it goes to the audit log), then a confirmation."""

    reason = forms.CharField(
        max_length=500,
        strip=True,
        widget=forms.TextInput(attrs={"placeholder": "e.g. XID 79 on GPU 3, waiting for RMA", "size": 48}),
        error_messages={"required": "Give a reason: it is recorded in the audit log."},
    )
    confirm = forms.CharField(required=False, widget=forms.HiddenInput)
    # Uncordon only: return the node although it has an open repair ticket (audited on the ticket).
    override = forms.BooleanField(required=False)

    @property
    def confirmed(self) -> bool:
        return self.is_valid() and self.cleaned_data["confirm"] == "yes"
