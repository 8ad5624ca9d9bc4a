"""/api/v1/flavors/: GPU flavors, read by everyone signed in, created and corrected by operators
through fleet.services.flavors (the flavor pages call the same). A taken name is a 409, and so is
deleting a flavor something still uses (nodes, quotas, pod sets), naming what."""
from __future__ import annotations

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Count
from drf_spectacular.utils import OpenApiResponse, OpenApiTypes, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.exceptions import APIException, PermissionDenied, ValidationError
from rest_framework.response import Response

from core.actors import Actor
from core.fields import StrictCharField
from core.filters import SearchFilter, StrictFilterBackend
from core.parsers import StrictJSONParser
from core.permissions import ReadOnlyOrOperator
from core.refusals import InUse
from fleet.models import GpuFlavor
from fleet.services.flavors import UNIQUE, flavor_create, flavor_delete, flavor_update

MAX_MEMORY_MIB = 2**31 - 1  # the column's bound on PostgreSQL


class FlavorSerializer(serializers.ModelSerializer):
    nodes = serializers.IntegerField(source="node_count", read_only=True, help_text="Nodes of this flavor")
    gpus = serializers.IntegerField(source="gpu_count", read_only=True, help_text="GPUs of this flavor")

    class Meta:
        model = GpuFlavor
        fields = ["id", "name", "product", "memory_mib", "nodes", "gpus"]
        read_only_fields = fields


class FlavorInputSerializer(serializers.Serializer):
    name = StrictCharField(max_length=64, help_text="e.g. H100-SXM-80GB; quotas are set per flavor")
    product = StrictCharField(max_length=128, help_text="NVML product name, e.g. NVIDIA H100 80GB HBM3")
    memory_mib = serializers.IntegerField(min_value=1, max_value=MAX_MEMORY_MIB)


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT


def _call(fn, **kwargs):
    try:
        return fn(**kwargs)
    except InUse as exc:
        conflict = Conflict()
        conflict.detail = {"detail": "; ".join(exc.uses), "in_use": exc.uses}
        raise conflict from exc
    except DjangoValidationError as exc:
        if not hasattr(exc, "error_dict"):
            raise ValidationError({"non_field_errors": exc.messages}) from exc
        codes = {e.code for errors in exc.error_dict.values() for e in errors}
        # A taken name alone is a conflict with what exists; anything else is bad input.
        raise (Conflict if codes == {UNIQUE} else ValidationError)(exc.message_dict) from exc
    except DjangoPermissionDenied as exc:
        raise PermissionDenied(str(exc) or None) from exc


BAD = OpenApiResponse(OpenApiTypes.OBJECT, description="Invalid input, keyed by field")
TAKEN = OpenApiResponse(OpenApiTypes.OBJECT, description='The name is taken: {"name": [...]}')
IN_USE = OpenApiResponse(OpenApiTypes.OBJECT, description=(
    'Still in use, nothing deleted: {"detail": "flavor H100 is used by 12 nodes", "in_use": [...]}'))


@extend_schema_view(
    list=extend_schema(summary="List GPU flavors", description="With their node and GPU counts. `?search=` matches "
                       "name and product."),
    retrieve=extend_schema(summary="Get a flavor by name"),
    create=extend_schema(summary="Define a flavor", description="Audited. Operators only.",
                         request=FlavorInputSerializer, responses={201: FlavorSerializer, 400: BAD, 409: TAKEN}),
    partial_update=extend_schema(summary="Correct a flavor", description="Renaming keeps its nodes and quotas. "
                                 "Audited. Operators only.", request=FlavorInputSerializer,
                                 responses={200: FlavorSerializer, 400: BAD, 409: TAKEN}),
    destroy=extend_schema(summary="Delete a flavor", description="Only one no node, quota, pod set or quota "
                          "request uses: a 409 names what still does. Audited. Operators only.",
                          responses={204: None, 409: IN_USE}),
)
class FlavorViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                    mixins.UpdateModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet):
    serializer_class = FlavorSerializer
    permission_classes = [ReadOnlyOrOperator]
    parser_classes = [StrictJSONParser]
    filter_backends = [StrictFilterBackend, SearchFilter]
    search_fields = ["name", "product"]
    lookup_field = "name"
    lookup_value_regex = r"[^/]+"
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self):
        return GpuFlavor.objects.annotate(node_count=Count("nodes", distinct=True),
                                          gpu_count=Count("nodes__gpus", distinct=True))

    def _body(self, *, partial: bool) -> dict:
        body = FlavorInputSerializer(data=self.request.data, partial=partial)
        body.is_valid(raise_exception=True)
        return dict(body.validated_data)

    def _answer(self, flavor: GpuFlavor, code: int = status.HTTP_200_OK) -> Response:
        return Response(FlavorSerializer(self.get_queryset().get(pk=flavor.pk)).data, status=code)

    def create(self, request, *args, **kwargs):
        flavor = _call(flavor_create, actor=Actor.from_request(request), **self._body(partial=False))
        return self._answer(flavor, status.HTTP_201_CREATED)

    def update(self, request, *args, **kwargs):
        flavor = self.get_object()
        flavor = _call(flavor_update, actor=Actor.from_request(request), flavor=flavor, **self._body(partial=True))
        return self._answer(flavor)

    def destroy(self, request, *args, **kwargs):
        _call(flavor_delete, actor=Actor.from_request(request), flavor=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)
