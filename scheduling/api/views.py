"""Workloads, queues and node drains over HTTP. Views only translate: services decide."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Prefetch
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, OpenApiTypes, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from core.actors import Actor
from core.parsers import StrictJSONParser
from core.permissions import IsOperator
from core.roles import may_act_for_team
from fleet.models import Node
from scheduling import limits
from scheduling.filtersets import WorkloadApiFilter
from scheduling.models import PodSet, Workload
from scheduling.selectors import queue_positions
from scheduling.services import node_drain, workload_cancel, workload_heartbeat
from scheduling.services.after_failure import workload_after_failure_choose
from scheduling.services.submission_keys import IdempotencyConflict, workload_submit_once

from .serializers import (
    AfterFailureSerializer,
    CancelSerializer,
    DrainSerializer,
    HeartbeatSerializer,
    WorkloadDetailSerializer,
    WorkloadListSerializer,
    WorkloadSubmitSerializer,
)

IDEMPOTENCY_KEY = "Idempotency-Key"
IDEMPOTENCY_KEY_PARAMETER = OpenApiParameter(
    IDEMPOTENCY_KEY,
    # What _idempotency_key accepts, so a client reads the rule here rather than from a 400.
    {"type": "string", "pattern": f"^[!-~]{{1,{limits.MAX_IDEMPOTENCY_KEY_LENGTH}}}$"},
    OpenApiParameter.HEADER,
    description=(
        f"Any unique string of 1 to {limits.MAX_IDEMPOTENCY_KEY_LENGTH} visible ASCII characters. A retry with "
        f"the same key and body within {limits.IDEMPOTENCY_WINDOW_SECONDS // 3600} hours answers 200 with the "
        "workload the first request queued instead of queueing another; the same key with a different "
        "body answers 422."
    ),
)
BAD_INPUT = OpenApiResponse(
    OpenApiTypes.OBJECT,
    description='Invalid input, keyed by the field with the reason, e.g. {"pod_sets[0].replicas": ["Must be at '
    f'most {limits.MAX_REPLICAS}."]}}; or a body that is not JSON any column can store ({{"detail": ...}}).',
)


def call_service(fn, **kwargs):
    """Django's ValidationError/PermissionDenied from a service become 400/403 answers."""
    try:
        return fn(**kwargs)
    except DjangoValidationError as exc:
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        raise ValidationError(detail) from exc
    except DjangoPermissionDenied as exc:
        raise PermissionDenied(str(exc) or None) from exc


class WorkloadViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Submit, inspect and cancel workloads. Team members act for their own teams only."""

    filterset_class = WorkloadApiFilter
    parser_classes = [StrictJSONParser]  # the schema's one request type: a form has no nested pod sets

    def get_queryset(self):
        qs = Workload.objects.visible_to(self.request.user).select_related("team", "queue", "priority_class")
        qs = qs.prefetch_related(Prefetch("pod_sets", queryset=PodSet.objects.select_related("flavor")))
        if self.action == "retrieve":
            qs = qs.prefetch_related("transitions")
        return qs

    def get_serializer_class(self):
        return WorkloadDetailSerializer if self.action == "retrieve" else WorkloadListSerializer

    def get_serializer(self, *args, **kwargs):
        # Queue positions are computed on read, in one query for the workloads being rendered.
        if args and isinstance(args[0], (Workload, list)):
            rendered = args[0] if isinstance(args[0], list) else [args[0]]
            kwargs["context"] = {**self.get_serializer_context(), "positions": queue_positions(rendered)}
        return super().get_serializer(*args, **kwargs)

    def _render(self, serializer_class, workload: Workload) -> dict:
        context = {**self.get_serializer_context(), "positions": queue_positions([workload])}
        return serializer_class(workload, context=context).data

    @extend_schema(
        request=WorkloadSubmitSerializer,
        parameters=[IDEMPOTENCY_KEY_PARAMETER],
        responses={
            201: WorkloadDetailSerializer,
            200: OpenApiResponse(WorkloadDetailSerializer, description="A retry: the workload its key queued"),
            400: BAD_INPUT,
            422: OpenApiResponse(
                OpenApiTypes.OBJECT, description=f"The {IDEMPOTENCY_KEY} was used for a different body"
            ),
        },
    )
    def create(self, request, *args, **kwargs):
        key = _idempotency_key(request)
        try:
            outcome = call_service(workload_submit_once, spec=request.data, actor=Actor.from_request(request), key=key)
        except IdempotencyConflict as exc:
            return Response({IDEMPOTENCY_KEY: [str(exc)]}, status=status.HTTP_422_UNPROCESSABLE_ENTITY)
        workload = self.get_queryset().prefetch_related("transitions").get(pk=outcome.workload.pk)
        code = status.HTTP_201_CREATED if outcome.created else status.HTTP_200_OK
        return Response(self._render(WorkloadDetailSerializer, workload), status=code)

    @extend_schema(request=AfterFailureSerializer, responses={200: WorkloadDetailSerializer, 400: BAD_INPUT})
    @action(detail=True, methods=["post"], url_path="after-failure")
    def after_failure(self, request, pk=None):
        """After a failure stopped the gang: the seed's three choices (the workload page's buttons)."""
        workload = self.get_object()
        body = AfterFailureSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        call_service(workload_after_failure_choose, workload=workload, actor=Actor.from_request(request),
                     **body.validated_data)
        return Response(self._render(WorkloadDetailSerializer, self.get_queryset().get(pk=workload.pk)))

    @extend_schema(request=CancelSerializer, responses={200: WorkloadDetailSerializer, 400: BAD_INPUT})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        workload = self.get_object()
        body = CancelSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        call_service(
            workload_cancel, workload=workload, actor=Actor.from_request(request), reason=body.validated_data["reason"]
        )
        return Response(self._render(WorkloadDetailSerializer, self.get_queryset().get(pk=workload.pk)))

    @extend_schema(request=HeartbeatSerializer, responses={200: WorkloadListSerializer, 400: BAD_INPUT})
    @action(detail=True, methods=["post"])
    def heartbeat(self, request, pk=None):
        """Progress of a real job: {"step": ..., "checkpoint_at": ...} (its latest checkpoint)."""
        workload = self.get_object()
        if not may_act_for_team(request.user, workload.team_id):
            raise PermissionDenied("Only the workload's team (or an operator) may report its progress.")
        body = HeartbeatSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        workload = call_service(
            workload_heartbeat,
            workload=workload,
            step=body.validated_data["step"],
            checkpoint_at=body.validated_data.get("checkpoint_at"),
            actor=Actor.from_request(request),
        )
        return Response(self._render(WorkloadListSerializer, self.get_queryset().get(pk=workload.pk)))


class NodeDrainView(APIView):
    """POST {"reason", "grace_seconds"}: cordon the node, stop and requeue every gang on it."""

    permission_classes = [IsOperator]

    @extend_schema(request=DrainSerializer, responses={200: OpenApiTypes.OBJECT, 400: BAD_INPUT})
    def post(self, request, name: str):
        node = get_object_or_404(Node, name=name)
        body = DrainSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        outcome = call_service(node_drain, node=node, actor=Actor.from_request(request), **body.validated_data)
        return Response(
            {
                "node": outcome.node.name,
                "state": outcome.node.state,
                "stopped": [
                    {
                        "id": s.workload.pk,
                        "name": s.workload.name,
                        "state": s.workload.state,
                        "lost_gpu_hours": round(s.lost_gpu_seconds / 3600, 3),
                    }
                    for s in outcome.stops
                ],
            }
        )


def _idempotency_key(request) -> str | None:
    """The request's Idempotency-Key header (None without one); a malformed one is a 400."""
    key = request.headers.get(IDEMPOTENCY_KEY)
    if key is None:
        return None
    if not 1 <= len(key) <= limits.MAX_IDEMPOTENCY_KEY_LENGTH or not all("!" <= c <= "~" for c in key):
        raise ValidationError(
            {IDEMPOTENCY_KEY: [f"Must be 1 to {limits.MAX_IDEMPOTENCY_KEY_LENGTH} visible ASCII characters."]}
        )
    return key
