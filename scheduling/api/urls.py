from django.urls import path
from rest_framework.routers import SimpleRouter

from scheduling.quota_requests.api import QuotaRequestViewSet

from .policy import CohortViewSet, PreemptionViewSet, PriorityClassViewSet, QueueViewSet, TeamViewSet
from .saturation import SaturationView
from .views import NodeDrainView, WorkloadViewSet

router = SimpleRouter(trailing_slash=True)
router.register("quota-requests", QuotaRequestViewSet, basename="quota-request")
router.register("workloads", WorkloadViewSet, basename="workload")
router.register("teams", TeamViewSet, basename="team")
router.register("cohorts", CohortViewSet, basename="cohort")
router.register("queues", QueueViewSet, basename="queue")
router.register("priority-classes", PriorityClassViewSet, basename="priority-class")
router.register("preemptions", PreemptionViewSet, basename="preemption")
urlpatterns = [
    # fleet's router owns nodes/<name>/; the drain action lives here, with the scheduler.
    path("nodes/<str:name>/drain/", NodeDrainView.as_view(), name="node-drain"),
    path("saturation/", SaturationView.as_view(), name="saturation"),
    *router.urls,
]
