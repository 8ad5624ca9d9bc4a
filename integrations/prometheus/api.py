"""POST /api/v1/alertmanager/webhook/: Alertmanager's webhook_config posts here.

Authenticated by its own bearer token (Alertmanager's `http_config.authorization.credentials`),
which Fleetdeck keeps only as a SHA-256 digest (FLEETDECK ALERTMANAGER_WEBHOOK_TOKEN_SHA256)."""
from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from drf_spectacular.utils import extend_schema
from rest_framework import authentication, exceptions, serializers
from rest_framework.permissions import BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView

from .alerts_in import alerts_receive

MAX_ALERTS = 1000  # Alertmanager's max_alerts caps a post; a bigger one is not Alertmanager's


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(frozen=True)
class AlertmanagerPrincipal:
    """request.user of a webhook post: Alertmanager, never a person."""

    is_authenticated: bool = True
    is_anonymous: bool = False
    is_superuser: bool = False
    pk: None = None

    def get_username(self) -> str:
        return "alertmanager"


class AlertmanagerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if not header or header[0] != self.keyword:
            # No bearer credentials: a 401 with WWW-Authenticate (DRF's NotAuthenticated), on or off.
            return None
        expected = settings.FLEETDECK.get("ALERTMANAGER_WEBHOOK_TOKEN_SHA256", "")
        if not expected:
            raise exceptions.PermissionDenied("The Alertmanager webhook is off: set ALERTMANAGER_WEBHOOK_TOKEN.")
        if len(header) != 2 or not hmac.compare_digest(token_digest(header[1]), expected):
            raise exceptions.AuthenticationFailed("Wrong Alertmanager webhook token.")
        return AlertmanagerPrincipal(), "alertmanager"

    def authenticate_header(self, request) -> str:
        return self.keyword


class IsAlertmanager(BasePermission):
    message = "The Alertmanager webhook token is required."

    def has_permission(self, request, view) -> bool:
        return isinstance(request.user, AlertmanagerPrincipal)


class AlertmanagerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "integrations.prometheus.api.AlertmanagerTokenAuthentication"
    name = "alertmanagerToken"

    def get_security_definition(self, auto_schema):
        return build_bearer_security_scheme_object(header_name="Authorization", token_prefix="Bearer")


class AlertSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["firing", "resolved"])
    labels = serializers.DictField(child=serializers.CharField(allow_blank=True, max_length=1024))
    annotations = serializers.DictField(child=serializers.CharField(allow_blank=True, max_length=4096),
                                        required=False, default=dict)
    startsAt = serializers.DateTimeField()  # Alertmanager's field names
    endsAt = serializers.DateTimeField(required=False, allow_null=True)
    fingerprint = serializers.CharField(max_length=64)

    def validate_endsAt(self, value):
        # Alertmanager sends 0001-01-01T00:00:00Z for "not ended".
        return None if value is not None and value.year < 1970 else value


class WebhookSerializer(serializers.Serializer):
    version = serializers.CharField(required=False)
    status = serializers.ChoiceField(choices=["firing", "resolved"], required=False)
    alerts = serializers.ListField(child=AlertSerializer(), max_length=MAX_ALERTS)


class AlertmanagerWebhookView(APIView):
    authentication_classes = [AlertmanagerTokenAuthentication]
    permission_classes = [IsAlertmanager]

    @extend_schema(request=WebhookSerializer, responses={200: dict}, summary="Alertmanager webhook receiver")
    def post(self, request):
        data = WebhookSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        outcome = alerts_receive(alerts=data.validated_data["alerts"], now=timezone.now())
        return Response(outcome.to_json())
