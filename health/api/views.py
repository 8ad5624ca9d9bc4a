"""Health API: telemetry and agent ingestion (node tokens), faults, events and repair tickets.

Views only translate HTTP to service calls. Ingestion reads the raw body itself (limit 5 MB,
413 beyond) and never lets DRF parse it, so a huge or malformed upload is refused before work."""
from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.shortcuts import get_object_or_404
from django_filters import rest_framework as filters
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, OpenApiTypes, extend_schema, extend_schema_view
from rest_framework import generics, mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, NotFound, PermissionDenied
from rest_framework.response import Response
from rest_framework.views import APIView

from core.actors import Actor
from core.filters import SearchFilter, StrictBooleanFilter, StrictFilterBackend, WholeNumberFilter
from core.parsers import StrictJSONParser
from core.permissions import IsOperator, ReadOnlyOrOperator
from fleet.agent.payloads import HeartbeatPayload, RegisterPayload
from fleet.models import Gpu, Node
from health import services
from health.choices import EventKind, EventSource, Reporter, Severity
from health.models import HealthEvent, RepairTicket
from scheduling.models import Workload

from . import agent_schema
from .authentication import IsNodeAgent, NodeTokenAuthentication
from .serializers import (
    BurnInInputSerializer,
    BurnInResultSerializer,
    FaultInputSerializer,
    HealthEventSerializer,
    MarkHealthyInputSerializer,
    MarkHealthyOutputSerializer,
    RepairTicketDetailSerializer,
    RepairTicketSerializer,
    TicketCreateSerializer,
    TicketTransitionInputSerializer,
)

MAX_BODY = 5 * 1024 * 1024


class PayloadTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = f"Payload larger than {MAX_BODY // (1024 * 1024)} MB."
    default_code = "too_large"


class BadInput(Exception):
    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field, self.reason = field, reason


def _bad(field: str, reason: str, code: str = "invalid") -> Response:
    return Response({"message": f"{field}: {reason}", "code": code, "extra": {field: [reason]}},
                    status=status.HTTP_400_BAD_REQUEST)


def _validation_response(exc: DjangoValidationError) -> Response:
    if hasattr(exc, "error_dict"):
        field, errors = next(iter(exc.message_dict.items()))
        return _bad(field, errors[0], exc.error_dict[field][0].code or "invalid")
    return _bad("body", exc.messages[0])


class _NodeIngestView(APIView):
    authentication_classes = [NodeTokenAuthentication]
    permission_classes = [IsNodeAgent]

    def read_body(self, request) -> bytes:
        length = request.META.get("CONTENT_LENGTH") or "0"
        if length.isdigit() and int(length) > MAX_BODY:
            raise PayloadTooLarge()
        body = request._request.read(MAX_BODY + 1)
        if len(body) > MAX_BODY:
            raise PayloadTooLarge()
        return body

    def read_json(self, request) -> Any:
        body = self.read_body(request)
        try:
            return json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadInput("body", f"not valid JSON ({exc})") from exc

    def target_node(self, request, name: Any) -> Node:
        if not isinstance(name, str) or not name:
            raise BadInput("node", "This field is required.")
        node = Node.objects.filter(name=name).first()
        if node is None:
            raise NotFound(f"No node named {name!r}.")
        if node.pk != request.auth.node_id:
            raise PermissionDenied(f"This token belongs to node {request.auth.node.name}, not {name}.")
        return node

    def handle_exception(self, exc):
        if isinstance(exc, BadInput):
            return _bad(exc.field, exc.reason)
        if isinstance(exc, DjangoValidationError):
            return _validation_response(exc)
        return super().handle_exception(exc)


def _signal_summary(outcome: services.SignalOutcome) -> dict[str, Any]:
    return {
        "events_created": len(outcome.created),
        "events_repeated": len(outcome.repeated),
        "duplicates": outcome.duplicates,
        "events": [e.pk for e in outcome.created + outcome.repeated],
        "actions": outcome.actions,
    }


class DcgmIngestView(_NodeIngestView):
    """POST dcgm-exporter text: text/plain body with ?node=NAME, or JSON {"node", "text"}."""

    @extend_schema(request=agent_schema.DCGM_BODY, responses={200: OpenApiTypes.OBJECT}, summary="Push DCGM telemetry",
                   parameters=[OpenApiParameter("node", str, description="The node, for a text/plain body")])
    def post(self, request):
        content_type = (request.content_type or "").split(";")[0].strip()
        if content_type == "application/json":
            data = self.read_json(request)
            if not isinstance(data, dict):
                raise BadInput("body", "expected an object with node and text")
            name, text = data.get("node"), data.get("text")
            if not isinstance(text, str) or not text.strip():
                raise BadInput("text", "This field is required (the exposition text).")
        else:
            body = self.read_body(request)
            name = request.query_params.get("node")
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BadInput("text", "not UTF-8 text") from exc
        node = self.target_node(request, name)
        limit = settings.FLEETDECK.get("DCGM_MAX_PAYLOAD_BYTES", 4 * 1024 * 1024)
        if len(text.encode()) > limit:
            raise PayloadTooLarge(f"DCGM exposition larger than {limit} bytes (DCGM_MAX_PAYLOAD_BYTES).")
        outcome = services.dcgm_ingest(node=node, text=text)
        unmatched = [r.uuid or f"gpu {r.gpu_index}" for r in outcome.unmatched]
        return Response({"node": node.name, "readings": len(outcome.readings), "stored": outcome.stored,
                         "unmatched": unmatched, "refused": outcome.refused, **_signal_summary(outcome.signals)})


class KernelLogIngestView(_NodeIngestView):
    """POST {"node": NAME, "lines": ["...", ...]}."""

    @extend_schema(request=agent_schema.KERNEL_LOG_BODY, responses={200: OpenApiTypes.OBJECT},
                   summary="Push kernel-log lines")
    def post(self, request):
        data = self.read_json(request)
        if not isinstance(data, dict):
            raise BadInput("body", "expected an object with node and lines")
        lines = data.get("lines")
        if not isinstance(lines, list) or not lines:
            raise BadInput("lines", "expected a non-empty list of strings")
        node = self.target_node(request, data.get("node"))
        outcome = services.kernel_log_ingest(node=node, lines=lines)
        return Response({"node": node.name, "recognised": len(outcome.events), "learned": outcome.learned,
                         "rejected": outcome.rejected, "unmatched": outcome.unmatched,
                         **_signal_summary(outcome.signals)})


class AgentRegisterView(_NodeIngestView):
    @extend_schema(request=agent_schema.REGISTER_BODY, responses={200: OpenApiTypes.OBJECT, 201: OpenApiTypes.OBJECT},
                   summary="Agent registration")
    def post(self, request):
        data = self.read_json(request)
        try:
            payload = RegisterPayload.from_dict(data)
        except ValueError as exc:
            field, _, reason = str(exc).partition(": ")
            raise BadInput(field, reason or str(exc)) from exc
        node = self.target_node(request, payload.node)
        first = not hasattr(node, "agent_status")
        counts = services.agent_register(node=node, payload=payload)
        return Response({"node": node.name, "gpus": counts},
                        status=status.HTTP_201_CREATED if first else status.HTTP_200_OK)


class AgentHeartbeatView(_NodeIngestView):
    @extend_schema(request=agent_schema.HEARTBEAT_BODY, responses={200: OpenApiTypes.OBJECT, 409: OpenApiTypes.OBJECT},
                   summary="Agent heartbeat")
    def post(self, request):
        data = self.read_json(request)
        try:
            payload = HeartbeatPayload.from_dict(data)
            burn_in = services.burn_in_from_body(data)
        except ValueError as exc:
            field, _, reason = str(exc).partition(": ")
            raise BadInput(field, reason or str(exc)) from exc
        node = self.target_node(request, payload.node)
        try:
            outcome = services.agent_heartbeat(node=node, payload=payload, burn_in=burn_in)
        except services.NotRegistered as exc:
            return Response({"message": str(exc), "code": "not_registered", "extra": {}},
                            status=status.HTTP_409_CONFLICT)
        return Response({"node": node.name, **outcome.to_dict()})


class WorkloadFaultView(APIView):
    """POST /api/v1/workloads/{id}/fault/ {"kind": "nccl_timeout"|"hang"|"oom", "nodes": [...]}."""

    @extend_schema(request=FaultInputSerializer, responses={200: OpenApiTypes.OBJECT},
                   summary="Report an application fault of a workload")
    def post(self, request, pk: int):
        workload = get_object_or_404(Workload.objects.visible_to(request.user), pk=pk)
        payload = FaultInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        try:
            outcome = services.app_fault(workload=workload, actor=Actor.from_request(request), **payload.validated_data)
        except DjangoPermissionDenied as exc:
            raise PermissionDenied(str(exc)) from exc
        except DjangoValidationError as exc:
            return _validation_response(exc)
        workload.refresh_from_db(fields=["state"])
        return Response({"workload": workload.pk, "state": workload.state, **_signal_summary(outcome)})


class GpuMarkHealthyView(APIView):
    """POST /api/v1/gpus/{uuid}/mark-healthy/ {"reason"}: an operator returns a GPU to service (the
    GPU addressed by its UUID, as /api/v1/gpus/{uuid}/ is)."""

    permission_classes = [IsOperator]

    @extend_schema(request=MarkHealthyInputSerializer, responses={200: MarkHealthyOutputSerializer},
                   summary="Mark a GPU healthy (operators)")
    def post(self, request, uuid: str):
        gpu = get_object_or_404(Gpu.objects.select_related("node"), uuid=uuid)
        payload = MarkHealthyInputSerializer(data=request.data)
        if not payload.is_valid():
            field, errors = next(iter(payload.errors.items()))
            return _bad(field, str(errors[0]), getattr(errors[0], "code", "invalid"))
        changed = services.gpu_mark_healthy(gpu=gpu, reason=payload.validated_data["reason"],
                                            actor=Actor.from_request(request))
        return Response({"gpu": gpu.pk, "uuid": gpu.uuid, "node": gpu.node.name, "health": gpu.health,
                         "changed": changed})


class HealthEventFilter(filters.FilterSet):
    node = filters.CharFilter(field_name="node__name")
    kind = filters.MultipleChoiceFilter(choices=EventKind.choices)
    severity = filters.MultipleChoiceFilter(choices=Severity.choices)
    source = filters.ChoiceFilter(choices=EventSource.choices)
    xid = WholeNumberFilter()
    workload = WholeNumberFilter(field_name="workload_id")
    unresolved = StrictBooleanFilter(field_name="resolved_at", lookup_expr="isnull")

    class Meta:
        model = HealthEvent
        fields = ["node", "kind", "severity", "source", "xid", "workload", "unresolved"]


@extend_schema_view(get=extend_schema(
    summary="List health events", description="Newest first; filter by node, kind, severity, source, xid, workload, "
    "unresolved. `?search=` matches the kind, node, GPU UUID and the evidence (the event's message)."))
class HealthEventListView(generics.ListAPIView):
    """Health events, newest first; filter by node, kind, severity, source, xid, workload; `?search=`
    matches kind, node name, GPU UUID and evidence."""

    serializer_class = HealthEventSerializer
    filterset_class = HealthEventFilter
    filter_backends = [StrictFilterBackend, SearchFilter]
    search_fields = ["kind", "node__name", "gpu_uuid", "evidence"]
    search_help = "the kind, the node name, the GPU UUID or the evidence"
    queryset = HealthEvent.objects.select_related("node")


@extend_schema_view(list=extend_schema(
    summary="List repair tickets", description="Filter by state; `?search=` matches the node name, the evidence, "
    "the remedy and who opened the ticket."))
class RepairTicketViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Repair tickets; operators open them and move them along (each move with a reason). `?search=`
    matches node name, evidence, remedy and opener."""

    permission_classes = [ReadOnlyOrOperator]
    parser_classes = [StrictJSONParser]  # the schema's one request type: a form has no null
    filter_backends = [StrictFilterBackend, SearchFilter]
    filterset_fields = ["state"]
    search_fields = ["node__name", "evidence", "remedy", "opened_by"]
    search_help = "the node name, the evidence, the remedy or who opened it"

    def get_queryset(self):
        queryset = RepairTicket.objects.select_related("node")
        if self.action == "retrieve":
            queryset = queryset.prefetch_related("transitions", "burn_ins", "events")
        return queryset

    def get_serializer_class(self):
        return RepairTicketSerializer if self.action == "list" else RepairTicketDetailSerializer

    def _detail(self, ticket: RepairTicket, code: int = status.HTTP_200_OK) -> Response:
        return Response(RepairTicketDetailSerializer(self.get_queryset().prefetch_related(
            "transitions", "burn_ins", "events").get(pk=ticket.pk)).data, status=code)

    @extend_schema(request=TicketCreateSerializer, responses={
        201: RepairTicketDetailSerializer,
        200: OpenApiResponse(RepairTicketDetailSerializer, description="The node already had an open ticket: that "
                             "ticket, with this evidence added"),
    })
    def create(self, request):
        payload = TicketCreateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        node = Node.objects.filter(name=payload.validated_data["node"]).first()
        if node is None:
            return _bad("node", f"Unknown node {payload.validated_data['node']!r}.")
        try:
            ticket, created = services.ticket_open(
                node=node, evidence=payload.validated_data["evidence"], actor=Actor.from_request(request),
                out_of_service=payload.validated_data["take_out_of_service"],
            )
        except DjangoValidationError as exc:
            return _validation_response(exc)
        return self._detail(ticket, status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(request=TicketTransitionInputSerializer, responses={200: RepairTicketDetailSerializer})
    @action(detail=True, methods=["post"])
    def transition(self, request, pk=None):
        ticket = self.get_object()
        payload = TicketTransitionInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        try:
            services.ticket_transition(ticket=ticket, to_state=payload.validated_data["to"],
                                       reason=payload.validated_data["reason"], actor=Actor.from_request(request))
        except services.TicketConflict as exc:
            return Response({"message": exc.messages[0], "code": "invalid_transition", "extra": exc.message_dict},
                            status=status.HTTP_409_CONFLICT)
        except DjangoValidationError as exc:
            return _validation_response(exc)
        return self._detail(ticket)

    @extend_schema(request=BurnInInputSerializer, responses={201: BurnInResultSerializer}, summary="Record burn-in")
    @action(detail=True, methods=["post"], url_path="burn-in")
    def burn_in(self, request, pk=None):
        ticket = self.get_object()
        payload = BurnInInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        try:
            result = services.burn_in_record(ticket=ticket, actor=Actor.from_request(request),
                                             reported_by=Reporter.OPERATOR, **payload.validated_data)
        except services.TicketConflict as exc:
            return Response({"message": exc.messages[0], "code": "invalid_state", "extra": exc.message_dict},
                            status=status.HTTP_409_CONFLICT)
        return Response(BurnInResultSerializer(result).data, status=status.HTTP_201_CREATED)
