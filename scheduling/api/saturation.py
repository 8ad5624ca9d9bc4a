"""/api/v1/saturation/: the overview's saturation signals (scheduling.saturation), the same
numbers the page and /metrics show."""
from __future__ import annotations

from dataclasses import asdict

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.filters import NO_SEARCH, SEARCH_REFUSED, refuse_search
from scheduling.saturation import saturation


class ClassPendingSerializer(serializers.Serializer):
    name = serializers.CharField()
    value = serializers.IntegerField(help_text="The class's priority")
    pending = serializers.IntegerField()
    oldest_age_seconds = serializers.FloatField(allow_null=True)
    stands_out = serializers.BooleanField(help_text="Work of a class that may preempt is waiting")


class WaitBySizeSerializer(serializers.Serializer):
    label = serializers.CharField(help_text="GPUs asked")
    admissions = serializers.IntegerField()
    p50_seconds = serializers.FloatField(allow_null=True)
    p95_seconds = serializers.FloatField(allow_null=True)


class SaturationSerializer(serializers.Serializer):
    window_hours = serializers.IntegerField(help_text="Admissions and preemptions count over this window")
    pending = ClassPendingSerializer(many=True)
    wait_by_size = WaitBySizeSerializer(many=True)
    admissions = serializers.IntegerField()
    time_to_bind_p95_seconds = serializers.FloatField(allow_null=True)
    preemptions_per_hour = serializers.FloatField()
    idle_gpus = serializers.IntegerField(help_text="Healthy GPUs nothing holds on ready nodes")
    idle_gpus_unusable = serializers.IntegerField(
        help_text="Of those, the ones on nodes where no waiting workload fits one replica")


class SaturationView(APIView):
    @extend_schema(summary="Saturation signals", responses={200: SaturationSerializer, 400: SEARCH_REFUSED},
                   description="Pending per priority class, queue wait by job size, time-to-bind p95, "
                               "preemptions per hour and idle GPUs no waiting workload can use. "
                               f"{NO_SEARCH}: one answer for the whole fleet (a 400 if given).")
    def get(self, request):
        refuse_search(request, "The saturation signals")
        return Response(SaturationSerializer(asdict(saturation())).data)
