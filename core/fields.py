"""Serializer fields as strict as the schema drf-spectacular writes for them."""
from __future__ import annotations

from rest_framework import serializers


class StrictCharField(serializers.CharField):
    """Text only: DRF's CharField turns a JSON number into its digits, while the schema says
    `string`, so `{"name": 5}` is a 400 naming the field here, as a client reading the schema expects."""

    default_error_messages = {"invalid": "Not a string."}

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """JSON true or false only: DRF's BooleanField also takes 0, 1, "yes", "on", ... which the
    schema's `boolean` does not, so `{"confirm": 1}` is a 400 naming the field."""

    default_error_messages = {"invalid": "Must be true or false."}

    def to_internal_value(self, data):
        if data is True or data is False:
            return data
        self.fail("invalid")
