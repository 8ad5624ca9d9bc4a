from django import forms

from core.models import TokenScope
from core.tokens import DEFAULT_DAYS, MAX_DAYS, MAX_NAME_LENGTH


class TokenCreateForm(forms.Form):
    name = forms.CharField(max_length=MAX_NAME_LENGTH, strip=True,
                           widget=forms.TextInput(attrs={"placeholder": "e.g. nightly eval submitter"}))
    expires_in_days = forms.IntegerField(min_value=1, max_value=MAX_DAYS, initial=DEFAULT_DAYS,
                                         label="Expires in (days)")
    scopes = forms.MultipleChoiceField(choices=TokenScope.choices, required=False, widget=forms.CheckboxSelectMultiple,
                                       help_text="None ticked: the token has all your rights.")
