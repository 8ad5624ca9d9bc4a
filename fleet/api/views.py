"""Inventory API: read-only racks, nodes and GPUs; cordon and uncordon commands for operators."""
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Count
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from core.actors import Actor
from core.filters import SearchFilter, StrictFilterBackend
from core.permissions import IsOperator, ReadOnlyOrOperator
from fleet.agent_tokens import node_token_rotate
from fleet.filtersets import GpuApiFilterSet, NodeApiFilterSet, RackFilterSet
from fleet.models import Gpu, Node, Rack
from fleet.services import NodeStateConflict, node_cordon, node_uncordon

from .export import CHUNK, CsvRenderer, chunked, csv_chunks
from .serializers import (
    CordonInputSerializer,
    GpuSerializer,
    NodeDetailSerializer,
    NodeSerializer,
    RackSerializer,
    UncordonInputSerializer,
)

# Node and rack names may contain dots (host-style names), which the default lookup regex rejects.
NAME_LOOKUP = r"[^/]+"


@extend_schema_view(
    list=extend_schema(summary="List racks", description="Racks with their spine and node/GPU counts. `?search=` "
                       "matches the rack and spine names."),
    retrieve=extend_schema(summary="Get a rack by name"),
)
class RackViewSet(viewsets.ReadOnlyModelViewSet):
    """Racks, read by everyone signed in; `?search=` matches the rack's and its spine's names."""

    queryset = Rack.objects.select_related("spine").annotate(
        node_count=Count("nodes", distinct=True), gpu_count=Count("nodes__gpus", distinct=True)
    )
    serializer_class = RackSerializer
    filterset_class = RackFilterSet
    filter_backends = [StrictFilterBackend, SearchFilter]
    search_fields = ["name", "spine__name"]
    search_help = "the rack or spine name"
    permission_classes = [ReadOnlyOrOperator]
    lookup_field = "name"
    lookup_value_regex = NAME_LOOKUP


def _transition_schema(summary: str, description: str, request):
    """The OpenAPI description shared by cordon and uncordon."""
    return extend_schema(
        summary=summary,
        description=description,
        request=request,
        responses={
            200: NodeDetailSerializer,
            400: OpenApiResponse(description='Missing or blank reason: {"reason": ["This field is required."]}'),
            403: OpenApiResponse(description="Not an operator"),
            404: OpenApiResponse(description="No such node"),
            409: OpenApiResponse(OpenApiTypes.OBJECT, description="The node's state forbids it (repair, burn-in)"),
        },
    )


@extend_schema_view(
    list=extend_schema(summary="List nodes", description="Filter by rack, spine, state, flavor, pool, executor; "
                       "`?search=` matches name, hostname and labels."),
    retrieve=extend_schema(summary="Get a node by name, with its GPUs"),
)
class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = NodeSerializer
    filterset_class = NodeApiFilterSet
    filter_backends = [StrictFilterBackend]
    permission_classes = [ReadOnlyOrOperator]
    lookup_field = "name"
    lookup_value_regex = NAME_LOOKUP

    def get_queryset(self):
        queryset = Node.objects.with_topology().with_gpu_counts()
        if self.action not in ("list", "export"):
            queryset = queryset.with_gpus()
        return queryset

    def get_serializer_class(self):
        return NodeSerializer if self.action == "list" else NodeDetailSerializer

    @extend_schema(
        summary="Export nodes as CSV",
        description="Every node the filters select (the list's filters and columns, ordered by name) in one "
        "text/csv answer, streamed as it is read, without pages. Objects (labels) are JSON, null an empty cell. "
        "`?search=` matches name, hostname and labels, as on the list.",
        filters=True,  # an action, not `list`: the schema would otherwise leave out the filters it takes
        responses={(200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="A header row, then one "
                                                      "row per node"),
                   (400, "application/json"): OpenApiResponse(OpenApiTypes.OBJECT,
                                                             description="A filter's bad value, named")},
        # The answer is CSV whatever ?format= says; the renderer is there for Accept: text/csv.
        parameters=[OpenApiParameter("format", exclude=True)],
    )
    @action(detail=False, methods=["get"], pagination_class=None, renderer_classes=[JSONRenderer, CsvRenderer])
    def export(self, request, format=None):  # noqa: A002 - DRF passes a format suffix (export.json) by this name
        nodes = self.filter_queryset(self.get_queryset())
        columns = NodeSerializer.Meta.fields

        # iterator(): a server-side cursor on PostgreSQL, CHUNK rows at a time, never the whole fleet.
        chunks = (NodeSerializer(chunk, many=True).data for chunk in chunked(nodes.iterator(chunk_size=CHUNK)))
        response = StreamingHttpResponse(csv_chunks(columns, chunks), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="fleetdeck-nodes.csv"'
        return response

    def _transition(self, request, service, input_serializer=CordonInputSerializer):
        node = self.get_object()
        payload = input_serializer(data=request.data)
        payload.is_valid(raise_exception=True)
        try:
            service(node=node, actor=Actor.from_request(request), **payload.validated_data)
        except NodeStateConflict as exc:
            return Response({"detail": exc.messages[0], "state": node.state}, status=status.HTTP_409_CONFLICT)
        except DjangoValidationError as exc:
            raise ValidationError(exc.message_dict if hasattr(exc, "error_dict") else exc.messages) from exc
        # Re-read through the queryset so the answer carries the same counts and GPUs as GET.
        return Response(NodeDetailSerializer(self.get_queryset().get(pk=node.pk)).data)

    @_transition_schema(
        "Cordon a node",
        "Stops new placements on the node. Idempotent: cordoning a cordoned node changes nothing. Operators only.",
        CordonInputSerializer,
    )
    @action(detail=True, methods=["post"], permission_classes=[IsOperator])
    def cordon(self, request, name=None):
        return self._transition(request, node_cordon)

    @_transition_schema(
        "Uncordon a node",
        "Returns a cordoned node to service. Idempotent. Draining nodes, and nodes with an open repair ticket "
        "(in repair, burn-in) are refused with 409 unless override is true (audited). Operators only.",
        UncordonInputSerializer,
    )
    @action(detail=True, methods=["post"], permission_classes=[IsOperator])
    def uncordon(self, request, name=None):
        return self._transition(request, node_uncordon, UncordonInputSerializer)

    @extend_schema(
        summary="Rotate a node's agent token",
        description="Issues the node a new agent token and invalidates the old one at once; the answer is the only "
        "place the new key is ever shown (Fleetdeck keeps its hash). Audited. Operators only.",
        request=None,
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description='{"node": "n1", "token": "<key>"}'),
                   403: OpenApiResponse(description="Not an operator"),
                   404: OpenApiResponse(description="No such node")},
    )
    @action(detail=True, methods=["post"], permission_classes=[IsOperator], url_path="rotate-token")
    def rotate_token(self, request, name=None):
        node = self.get_object()
        return Response({"node": node.name, "token": node_token_rotate(node=node, actor=Actor.from_request(request))})


@extend_schema_view(
    list=extend_schema(summary="List GPUs", description="Filter by node, rack, health, flavor, pool, allocated; "
                       "`?search=` matches node, UUID, PCI bus id and product."),
    retrieve=extend_schema(summary="Get a GPU by UUID"),
)
class GpuViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = Gpu.objects.select_related("node", "node__rack", "node__flavor").with_allocation()
    serializer_class = GpuSerializer
    filterset_class = GpuApiFilterSet
    filter_backends = [StrictFilterBackend]
    permission_classes = [ReadOnlyOrOperator]
    lookup_field = "uuid"
    lookup_value_regex = NAME_LOOKUP
