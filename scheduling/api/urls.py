from django.urls import path
from rest_framework.routers import SimpleRouter

from scheduling.quota_requests.api import QuotaRequestViewSet

from .views import NodeDrainView, QueueListView, WorkloadViewSet

router = SimpleRouter(trailing_slash=True)
router.register("quota-requests", QuotaRequestViewSet, basename="quota-request")
router.register("workloads", WorkloadViewSet, basename="workload")
urlpatterns = [
    # fleet's router owns nodes/<name>/; the drain action lives here, with the scheduler.
    path("nodes/<str:name>/drain/", NodeDrainView.as_view(), name="node-drain"),
    path("queues/", QueueListView.as_view(), name="queue-list"),
    *router.urls,
]
