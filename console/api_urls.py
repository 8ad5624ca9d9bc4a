from django.urls import path
from rest_framework.routers import SimpleRouter

from .audit.api import AuditEventViewSet
from .fleet_api import FragmentationView, IdleGpusView

router = SimpleRouter()
router.register("audit-events", AuditEventViewSet, basename="audit-event")
urlpatterns = [
    path("fragmentation/", FragmentationView.as_view(), name="fragmentation"),
    path("idle-gpus/", IdleGpusView.as_view(), name="idle-gpus"),
    *router.urls,
]
