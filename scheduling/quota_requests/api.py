"""/api/v1/quota-requests/: list and file requests; approve, deny and withdraw them.

Input serializers only parse; the same service functions as the form validate and act, so the
API and the pages refuse the same things. A service's ValidationError becomes a 400 keyed by
field, PermissionDenied a 403."""
from __future__ import annotations

from django import forms
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import MaxLengthValidator
from django.http import Http404
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, OpenApiTypes, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, NotFound, PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from core.actors import Actor
from core.fields import StrictCharField
from core.filters import SearchFilter, StrictFilterBackend
from core.parsers import StrictJSONParser
from core.roles import is_operator
from fleet.models import GpuFlavor
from scheduling import limits
from scheduling.models import Queue, QuotaRequest

from . import selectors, services


class QuotaRequestOutputSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.name")
    queue = serializers.CharField(source="queue.name")
    flavor = serializers.CharField(source="flavor.name")
    requested_by = serializers.CharField(source="requested_by.username", default=None, allow_null=True)
    reviewed_by = serializers.CharField(source="reviewed_by.username", default=None, allow_null=True)

    class Meta:
        model = QuotaRequest
        fields = [
            "id", "team", "queue", "flavor", "requested_nominal", "requested_borrowing_limit", "starts_on",
            "ends_on", "justification", "state", "requested_by", "created_at", "reviewed_by", "reviewed_at",
            "review_comment", "applied_at", "expired_at", "previous_nominal", "previous_borrowing_limit",
        ]
        read_only_fields = fields


# The form's own messages for what is not a number or a date, so both say the same thing.
WHOLE_NUMBER = {"invalid": forms.IntegerField.default_error_messages["invalid"]}
DATE = {"invalid": forms.DateField.default_error_messages["invalid"]}


# The service's words for what is missing or out of range, so the form and the API say the same.
NEED_GPUS = "Enter the number of GPUs you need."
NEED_WHY = "Explain why the team needs this quota."


class QuotaRequestInputSerializer(serializers.Serializer):
    """What the schema can state, stated here in the service's words; the service checks the rest
    (the flavor's capacity, dates from today, the queue's current quota, one open request per
    team and flavor). Without `starts_on` the request starts today, as the form's pre-filled date
    does; an explicit null is refused."""

    queue = serializers.SlugRelatedField(slug_field="name", queryset=Queue.objects.select_related("team"))
    flavor = serializers.SlugRelatedField(slug_field="name", queryset=GpuFlavor.objects.all())
    requested_nominal = serializers.IntegerField(
        min_value=1, help_text="At most the flavor's GPUs in the fleet",
        error_messages={**WHOLE_NUMBER, "required": NEED_GPUS, "null": NEED_GPUS,
                        "min_value": "Enter a positive whole number of GPUs."})
    requested_borrowing_limit = serializers.IntegerField(
        required=False, allow_null=True, default=None, min_value=0, help_text="At most the flavor's GPUs in the fleet",
        error_messages={**WHOLE_NUMBER, "min_value": "Enter a whole number of GPUs (0 or more)."})
    starts_on = serializers.DateField(required=False, help_text="Today or later; default today",
                                      error_messages={**DATE, "null": "Enter a start date."})
    ends_on = serializers.DateField(required=False, allow_null=True, default=None, help_text="After starts_on",
                                    error_messages=DATE)
    justification = StrictCharField(
        error_messages={"required": NEED_WHY, "blank": NEED_WHY},
        validators=[MaxLengthValidator(limits.MAX_JUSTIFICATION_LENGTH,
                                       message="At most %(limit_value)d characters, not %(show_value)d.")])


class ReviewInputSerializer(serializers.Serializer):
    comment = serializers.CharField(
        required=False, allow_blank=True, default="", max_length=limits.MAX_COMMENT_LENGTH
    )
    override = serializers.BooleanField(required=False, default=False)


BAD_INPUT = OpenApiResponse(
    OpenApiTypes.OBJECT,
    description='Invalid input, keyed by field with the reason, e.g. {"justification": ["At most '
    f'{limits.MAX_JUSTIFICATION_LENGTH} characters, not 5000."]}}',
)


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "Conflicts with an existing object."


def _as_drf(exc: DjangoValidationError) -> APIException:
    if hasattr(exc, "error_dict") and all(
        e.code == services.OPEN_REQUEST for errors in exc.error_dict.values() for e in errors
    ):
        return Conflict(exc.message_dict)
    if hasattr(exc, "error_dict"):
        return ValidationError(exc.message_dict)
    return ValidationError({"non_field_errors": exc.messages})


@extend_schema_view(list=extend_schema(
    summary="List quota requests", description="Operators see every request, others their teams'. Filter by "
    "state; `?search=` matches the team, queue and flavor names, the justification and who asked."))
class QuotaRequestViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = QuotaRequestOutputSerializer
    parser_classes = [StrictJSONParser]  # the schema's one request type: a form has no null
    filter_backends = [StrictFilterBackend, SearchFilter]
    filterset_fields = ["state"]
    search_fields = ["team__name", "queue__name", "flavor__name", "justification", "requested_by__username"]
    search_help = "the team, queue or flavor name, the justification or who asked"

    def get_queryset(self):
        return selectors.quota_requests_visible_to(self.request.user)

    def get_object(self) -> QuotaRequest:
        pk = self.kwargs["pk"]
        if not pk.isascii() or not pk.isdigit():
            raise NotFound("No such quota request.")
        try:
            return selectors.quota_request_for_user(self.request.user, int(pk))
        except Http404 as exc:
            raise NotFound(str(exc)) from exc
        except DjangoPermissionDenied as exc:
            raise PermissionDenied(str(exc)) from exc

    def _call(self, fn, **kwargs) -> QuotaRequest:
        try:
            return fn(actor=Actor.from_request(self.request), **kwargs)
        except DjangoPermissionDenied as exc:
            raise PermissionDenied(str(exc)) from exc
        except DjangoValidationError as exc:
            raise _as_drf(exc) from exc

    @extend_schema(request=QuotaRequestInputSerializer, responses={
        201: QuotaRequestOutputSerializer, 400: BAD_INPUT,
        409: OpenApiResponse(OpenApiTypes.OBJECT, description='The team already has an open request for the flavor: '
                             '{"flavor": ["... (#<id>); withdraw it or wait for its review."]}'),
    })
    def create(self, request: Request) -> Response:
        data = QuotaRequestInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        fields.setdefault("starts_on", timezone.localdate())
        quota_request = self._call(services.quota_request_create, **fields)
        return Response(QuotaRequestOutputSerializer(quota_request).data, status=status.HTTP_201_CREATED)

    def _reviewable(self) -> QuotaRequest:
        if not is_operator(self.request.user):
            raise PermissionDenied("Only operators may review quota requests.")
        return self.get_object()

    @extend_schema(request=ReviewInputSerializer, responses={200: QuotaRequestOutputSerializer, 400: BAD_INPUT})
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str) -> Response:
        quota_request = self._reviewable()
        body = ReviewInputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        done = self._call(services.quota_request_approve, quota_request=quota_request, **body.validated_data)
        return Response(QuotaRequestOutputSerializer(done).data)

    @extend_schema(request=ReviewInputSerializer, responses={200: QuotaRequestOutputSerializer, 400: BAD_INPUT})
    @action(detail=True, methods=["post"])
    def deny(self, request: Request, pk: str) -> Response:
        quota_request = self._reviewable()
        body = ReviewInputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        done = self._call(services.quota_request_deny, quota_request=quota_request,
                          comment=body.validated_data["comment"])
        return Response(QuotaRequestOutputSerializer(done).data)

    @extend_schema(request=None, responses=QuotaRequestOutputSerializer)
    @action(detail=True, methods=["post"])
    def withdraw(self, request: Request, pk: str) -> Response:
        done = self._call(services.quota_request_withdraw, quota_request=self.get_object())
        return Response(QuotaRequestOutputSerializer(done).data)
