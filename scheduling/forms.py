"""Forms of the scheduling pages."""

from django import forms


class NodeDrainForm(forms.Form):
    reason = forms.CharField(
        max_length=500, widget=forms.TextInput(attrs={"placeholder": "e.g. Xid 79 on GPU 3, replace the board"})
    )
    grace_seconds = forms.IntegerField(
        min_value=0, max_value=86400, initial=60, help_text="Time each stopped gang gets to write a checkpoint"
    )

    def clean_reason(self) -> str:
        reason = self.cleaned_data["reason"].strip()
        if not reason:
            raise forms.ValidationError("A reason is required to drain a node.")
        return reason


class WorkloadCancelForm(forms.Form):
    reason = forms.CharField(max_length=500, required=False)
