from django.urls import path
from rest_framework.routers import SimpleRouter

from .views import (
    AgentHeartbeatView,
    AgentRegisterView,
    DcgmIngestView,
    GpuMarkHealthyView,
    HealthEventListView,
    KernelLogIngestView,
    RepairTicketViewSet,
    WorkloadFaultView,
)

router = SimpleRouter(trailing_slash=True)
router.register("repair-tickets", RepairTicketViewSet, basename="repair-ticket")
urlpatterns = [
    path("telemetry/dcgm/", DcgmIngestView.as_view(), name="telemetry-dcgm"),
    path("telemetry/kernel-log/", KernelLogIngestView.as_view(), name="telemetry-kernel-log"),
    path("agent/register/", AgentRegisterView.as_view(), name="agent-register"),
    path("agent/heartbeat/", AgentHeartbeatView.as_view(), name="agent-heartbeat"),
    # scheduling's router owns workloads/<id>/; the fault report lives here, with the health loop.
    path("workloads/<int:pk>/fault/", WorkloadFaultView.as_view(), name="workload-fault"),
    path("gpus/<str:uuid>/mark-healthy/", GpuMarkHealthyView.as_view(), name="gpu-mark-healthy"),
    path("health-events/", HealthEventListView.as_view(), name="health-event-list"),
    *router.urls,
]
