"""/api/v1/fragmentation/ and /api/v1/idle-gpus/: the overview's fragmentation table and the
idle-allocated list, from the selectors the pages read (console.selectors.fleet_overview and
health.telemetry), so the API and the pages give the same numbers. The idle list takes `?search=`
(filtered here: the telemetry source may be Prometheus, not a queryset); the fragmentation table
is one answer for the fleet and refuses one."""
from __future__ import annotations

from dataclasses import asdict

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.filters import (
    NO_SEARCH,
    SEARCH_REFUSED,
    refuse_search,
    search_matches,
    search_parameter,
    search_terms,
)
from health import telemetry

from .selectors import fleet_overview


class FlavorFragmentationSerializer(serializers.Serializer):
    flavor = serializers.CharField(help_text='A flavor, or "All" for the fleet')
    nodes = serializers.IntegerField()
    gpus = serializers.IntegerField()
    allocatable = serializers.IntegerField(help_text="Healthy GPUs on ready nodes")
    allocated = serializers.IntegerField(help_text="GPUs holding at least one active allocation")
    free = serializers.IntegerField(help_text="Allocatable and not allocated: the next two together")
    fully_free_nodes = serializers.IntegerField(help_text="Ready nodes with every GPU healthy and none allocated")
    free_on_fully_free_nodes = serializers.IntegerField(help_text="Their GPUs: what whole-node jobs can use")
    idle_on_partial_nodes = serializers.IntegerField(
        help_text="Free GPUs on ready nodes that run something or have an unhealthy GPU: only smaller jobs fit")
    idle_on_unschedulable_nodes = serializers.IntegerField(help_text="Healthy idle GPUs on cordoned/non-ready nodes")
    unhealthy = serializers.IntegerField()


class FragmentationSerializer(serializers.Serializer):
    flavors = FlavorFragmentationSerializer(many=True)
    total = FlavorFragmentationSerializer()


class FragmentationView(APIView):
    @extend_schema(summary="Fragmentation per flavor", description="The overview's fragmentation table: free GPUs "
                   "split into those on fully free nodes and those stranded on partly used or degraded ones. "
                   f"{NO_SEARCH}: one answer for the whole fleet (a 400 if given).",
                   responses={200: FragmentationSerializer, 400: SEARCH_REFUSED})
    def get(self, request):
        refuse_search(request, "The fragmentation table")
        data = fleet_overview()
        rows = [asdict(cap) for cap in data.flavors]
        return Response(FragmentationSerializer({"flavors": rows, "total": asdict(data.total)}).data)


class IdleGpuSerializer(serializers.Serializer):
    node = serializers.CharField()
    gpu_index = serializers.IntegerField()
    gpu_uuid = serializers.CharField()
    workload_id = serializers.IntegerField()
    workload = serializers.CharField()
    team = serializers.CharField()
    sm_active = serializers.FloatField(help_text="Latest SM-active fraction, 0..1")
    peak_sm_active = serializers.FloatField(help_text="Highest SM-active fraction over the window")
    allocated_since = serializers.DateTimeField()


class IdleGpusSerializer(serializers.Serializer):
    source = serializers.CharField(help_text="The telemetry source asked")
    notice = serializers.CharField(help_text="Why the list is empty when the source did not answer; else empty")
    window_minutes = serializers.FloatField(help_text="How long a GPU must stay idle to be listed")
    gpus = IdleGpuSerializer(many=True)


class IdleGpusView(APIView):
    @extend_schema(summary="Allocated GPUs that sit idle", description="GPUs held by a workload whose SM activity "
                   "stayed under 5 % for the whole window (the idle GPUs page's list). `?search=` matches the "
                   "node, GPU UUID, workload and team.",
                   parameters=[search_parameter("the node name, GPU UUID, workload or team")],
                   responses={200: IdleGpusSerializer})
    def get(self, request):
        terms = search_terms(request)  # a bad search is a 400 before the telemetry source is asked
        answer = telemetry.idle_allocated(now=timezone.now())
        gpus = [gpu for gpu in answer.value if search_matches(terms, gpu.node, gpu.gpu_uuid, gpu.workload, gpu.team)]
        return Response(IdleGpusSerializer({
            "source": answer.source, "notice": answer.notice,
            "window_minutes": telemetry.idle_window().total_seconds() / 60,
            "gpus": [asdict(gpu) for gpu in gpus],
        }).data)
